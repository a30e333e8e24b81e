"""The job_runs table: one append-only row per finished background job execution."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

JOBS = ("reconcile", "refresh_prices", "check_integrity", "expire_grants", "deliver_alerts")

_INSERT = text(
    """
    INSERT INTO job_runs (job, started_at, finished_at, ok, summary)
    VALUES (:job, :started_at, :finished_at, :ok, CAST(:summary AS jsonb))
    RETURNING id, job, started_at, finished_at, ok, summary
    """
)
_LATEST = text(
    "SELECT id, job, started_at, finished_at, ok, summary FROM job_runs "
    "WHERE job = :job ORDER BY id DESC LIMIT 1"
)

_TOTALS = text(
    "SELECT job, ok, count(*) AS runs,"
    " coalesce(sum(extract(epoch FROM finished_at - started_at)), 0) AS seconds"
    " FROM job_runs GROUP BY job, ok ORDER BY job, ok"
)


async def totals(conn: AsyncConnection) -> list[Any]:
    """Recorded runs and their summed duration (exact numeric seconds), per job and outcome."""
    return list((await conn.execute(_TOTALS)).all())


async def record(
    conn: AsyncConnection,
    *,
    job: str,
    started_at: datetime,
    finished_at: datetime,
    ok: bool,
    summary: dict[str, Any],
) -> Any:
    params = {
        "job": job,
        "started_at": started_at,
        "finished_at": max(finished_at, started_at),
        "ok": ok,
        "summary": msgspec.json.encode(summary).decode(),
    }
    return (await conn.execute(_INSERT, params)).one()


async def latest(conn: AsyncConnection, job: str) -> Any | None:
    return (await conn.execute(_LATEST, {"job": job})).first()
