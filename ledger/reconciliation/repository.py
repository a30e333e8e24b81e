"""Every SQL statement of reconciliation: finding, locking and recording.

Eligibility (always evaluated with the database clock, `now()`):
- `open` and `expires_at` + grace <= now(), or
- `interrupted` and `interrupted_at` + grace <= now().

Lock order, as everywhere in the ledger: the account rows first (sorted by id),
then the hold rows. Both use SKIP LOCKED, so a reconciler never waits on a lock:
it can neither deadlock with the gateway (which waits on account rows) nor with
another reconciler, and a hold that another transaction is touching is skipped.
Eligibility is checked again after the locks are taken: a hold that changed in
the meantime (checkpointed, settled, resolved by another pass) drops out.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.holds.repository import HOLD_COLUMNS

_ELIGIBLE = (
    "((state = 'open' AND expires_at <= now() - make_interval(secs => :grace))"
    " OR (state = 'interrupted' AND interrupted_at <= now() - make_interval(secs => :grace)))"
)

# Unlocked: only a hint of what to lock. Most overdue first; each branch uses its partial index.
_CANDIDATES = text(
    """
    SELECT id, account_id FROM (
        SELECT id, account_id, expires_at AS since FROM holds
         WHERE state = 'open' AND expires_at <= now() - make_interval(secs => :grace)
        UNION ALL
        SELECT id, account_id, interrupted_at AS since FROM holds
         WHERE state = 'interrupted' AND interrupted_at <= now() - make_interval(secs => :grace)
    ) c
     WHERE NOT (id = ANY(CAST(:exclude AS uuid[])))
     ORDER BY since, id
     LIMIT :limit
    """
)

_LOCK_ACCOUNTS = text(
    "SELECT id FROM accounts WHERE id = ANY(CAST(:ids AS text[])) ORDER BY id FOR UPDATE SKIP LOCKED"
)

_LOCK_HOLDS = text(
    f"""
    SELECT {HOLD_COLUMNS} FROM holds
     WHERE id = ANY(CAST(:hold_ids AS uuid[])) AND account_id = ANY(CAST(:locked AS text[]))
       AND {_ELIGIBLE}
     ORDER BY id
       FOR UPDATE SKIP LOCKED
    """
)

_RUN_COLUMNS = (
    "id, started_at, finished_at, status, trigger, actor, grace_seconds, settled_count, released_count, "
    "skipped_count, charged_amount, released_amount, by_currency, items, errors"
)

_INSERT_RUN = text(
    f"""
    INSERT INTO reconciliation_runs (id, trigger, actor, grace_seconds)
    VALUES (:id, :trigger, :actor, :grace)
    RETURNING {_RUN_COLUMNS}
    """
)

_PROGRESS = text(
    """
    UPDATE reconciliation_runs
       SET settled_count = :settled, released_count = :released, skipped_count = :skipped,
           charged_amount = :charged, released_amount = :released_amount,
           by_currency = CAST(:by_currency AS jsonb),
           items = items || CAST(:new_items AS jsonb),
           errors = CAST(:errors AS jsonb)
     WHERE id = :id AND finished_at IS NULL
    """
)

_FINISH = text(
    f"""
    UPDATE reconciliation_runs
       SET status = :status, finished_at = now(), skipped_count = :skipped,
           errors = CAST(:errors AS jsonb)
     WHERE id = :id AND finished_at IS NULL
    RETURNING {_RUN_COLUMNS}
    """
)

_GET_RUN = text(f"SELECT {_RUN_COLUMNS} FROM reconciliation_runs WHERE id = :id")

_LIST_RUNS = text(
    f"""
    SELECT {_RUN_COLUMNS} FROM reconciliation_runs
     WHERE (CAST(:before AS uuid) IS NULL
            OR (started_at, id) < (SELECT started_at, id FROM reconciliation_runs WHERE id = :before))
       AND (NOT CAST(:nonempty AS boolean)
            OR settled_count + released_count > 0 OR status <> 'succeeded' OR errors <> '[]'::jsonb)
     ORDER BY started_at DESC, id DESC
     LIMIT :limit
    """
)

# Operational gauges: unresolved holds by state and the lag of the most overdue eligible hold.
_HOLDS_BY_STATE = text(
    """
    SELECT state, count(*) AS n, extract(epoch FROM now() - min(created_at)) AS oldest_age
      FROM holds WHERE state IN ('open', 'interrupted') GROUP BY state
    """
)
_HELD_BY_CURRENCY = text(
    "SELECT currency, sum(amount) AS held FROM holds WHERE state IN ('open', 'interrupted') GROUP BY currency"
)
_LAG = text(
    """
    SELECT coalesce(extract(epoch FROM now() - min(since)), 0) AS lag FROM (
        SELECT min(expires_at) + make_interval(secs => :grace) AS since FROM holds
         WHERE state = 'open' AND expires_at <= now() - make_interval(secs => :grace)
        UNION ALL
        SELECT min(interrupted_at) + make_interval(secs => :grace) FROM holds
         WHERE state = 'interrupted' AND interrupted_at <= now() - make_interval(secs => :grace)
    ) c
    """
)


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


async def candidates(conn: AsyncConnection, *, grace: int, exclude: list[UUID], limit: int) -> list[Any]:
    params = {"grace": grace, "exclude": exclude, "limit": limit}
    return list((await conn.execute(_CANDIDATES, params)).all())


async def lock_accounts(conn: AsyncConnection, account_ids: list[str]) -> list[str]:
    """Lock what can be locked now, in id order; the rest is held by someone else."""
    rows = (await conn.execute(_LOCK_ACCOUNTS, {"ids": sorted(set(account_ids))})).all()
    return [row.id for row in rows]


async def lock_eligible_holds(
    conn: AsyncConnection, *, hold_ids: list[UUID], locked_accounts: list[str], grace: int
) -> list[Any]:
    params = {"hold_ids": hold_ids, "locked": locked_accounts, "grace": grace}
    return list((await conn.execute(_LOCK_HOLDS, params)).all())


async def insert_run(conn: AsyncConnection, *, run_id: UUID, trigger: str, actor: str, grace: int) -> Any:
    params = {"id": run_id, "trigger": trigger, "actor": actor, "grace": grace}
    return (await conn.execute(_INSERT_RUN, params)).one()


async def record_progress(
    conn: AsyncConnection,
    run_id: UUID,
    *,
    totals: dict[str, Any],
    new_items: list[Any],
    errors: list[Any],
) -> None:
    params = {
        "id": run_id,
        "settled": totals["settled"],
        "released": totals["released"],
        "skipped": totals["skipped"],
        "charged": totals["charged"],
        "released_amount": totals["released_amount"],
        "by_currency": _json(totals["by_currency"]),
        "new_items": _json(new_items),
        "errors": _json(errors),
    }
    await conn.execute(_PROGRESS, params)


async def finish_run(
    conn: AsyncConnection, run_id: UUID, *, status: str, skipped: int, errors: list[Any]
) -> Any | None:
    params = {"id": run_id, "status": status, "skipped": skipped, "errors": _json(errors)}
    return (await conn.execute(_FINISH, params)).first()


async def get_run(conn: AsyncConnection, run_id: UUID) -> Any | None:
    return (await conn.execute(_GET_RUN, {"id": run_id})).first()


async def list_runs(
    conn: AsyncConnection, *, before: UUID | None, limit: int, nonempty: bool = False
) -> list[Any]:
    params = {"before": before, "limit": limit, "nonempty": nonempty}
    return list((await conn.execute(_LIST_RUNS, params)).all())


async def holds_by_state(conn: AsyncConnection) -> list[Any]:
    return list((await conn.execute(_HOLDS_BY_STATE)).all())


async def held_by_currency(conn: AsyncConnection) -> list[Any]:
    return list((await conn.execute(_HELD_BY_CURRENCY)).all())


async def lag_seconds(conn: AsyncConnection, *, grace: int) -> Any:
    return (await conn.execute(_LAG, {"grace": grace})).scalar_one()
