"""GET /healthz, /readyz, /metrics; GET /admin/v1/integrity and /admin/v1/audit-log.

/readyz also reports whether the primary has a synchronous standby (`replication`, from
`ledger.replication`'s kept answer, no query of its own); it is 503 `database_degraded`
only when LEDGER_REQUIRE_SYNC_STANDBY is on and there is none.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, get
from litestar.params import Parameter
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ledger.audit import repository as audit
from ledger.audit.repository import AuditAction  # an unknown action is 422 `action`
from ledger.db import current_revision, head_revision, read_only
from ledger.errors import DatabaseDegraded, DatabaseUnavailable, ValidationFailed
from ledger.http.auth import admin_guard
from ledger.http.query import From, IdCursor, To, time_range
from ledger.integrity import service as integrity
from ledger.metrics import render
from ledger.openapi import SECURITY
from ledger.openapi.responses import GUARDED, refusals
from ledger.pagination import id_cursor
from ledger.reconciliation import gauges
from ledger.replication import ReplicationWatch
from ledger.schemas import Page, iso

_ACTOR_ROLES = ("viewer", "finance", "admin")
_BARE_IDENTITIES = ("cli", "reconciler")  # ledger.context's actors without a token


def actor_filter(actor: str | None) -> tuple[str | None, str | None]:
    """(identity, role): `role:fingerprint`, `cli` or `reconciler` match the identity exactly,
    a role name alone matches every token of that role; anything else is 422, not an empty page."""
    if actor is None or ":" in actor or actor in _BARE_IDENTITIES:
        return actor, None
    if actor in _ACTOR_ROLES:
        return None, actor
    raise ValidationFailed(
        "actor must be an identity as recorded (e.g. 'finance:3f2a9c1b7d20e8a4', 'cli', 'reconciler') "
        f"or a role ({', '.join(_ACTOR_ROLES)})",
        param="actor",
    )


def engine_of(request: Request[Any, Any, Any]) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


def reads_of(request: Request[Any, Any, Any]) -> AsyncEngine:
    """The engine of the admin surface's lists (LEDGER_READ_DATABASE_URL, else the primary's)."""
    engine: AsyncEngine = request.app.state.reads
    return engine


class HealthController(Controller):
    path = "/"
    tags = ["operations"]

    @get("/healthz", summary="Alive")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get(
        "/readyz",
        summary="Database reachable and migrations at head",
        responses=refusals(
            503,
            notes={
                503: "`database_unavailable`, `migrations_pending`, or `database_degraded` (no synchronous "
                "standby while LEDGER_REQUIRE_SYNC_STANDBY is on)"
            },
        ),
    )
    async def readyz(self, request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
        head = head_revision()
        try:
            async with read_only(engine_of(request)) as conn:
                await conn.execute(text("SELECT 1"))
                current = await current_revision(conn)
        except DatabaseUnavailable:
            body = {
                "error": {
                    "type": "service_unavailable",
                    "code": "database_unavailable",
                    "message": "the database cannot be reached",
                    "param": None,
                }
            }
            return Response(body, status_code=503)
        if current != head:
            body = {
                "error": {
                    "type": "service_unavailable",
                    "code": "migrations_pending",
                    "message": f"database is at revision {current}, code expects {head}",
                    "param": None,
                }
            }
            return Response(body, status_code=503)
        replication: ReplicationWatch = request.app.state.replication
        try:
            replication.require()
        except DatabaseDegraded as error:
            refusal = {
                "error": {"type": error.type, "code": error.code, "message": error.message, "param": None}
            }
            return Response({**refusal, "replication": replication.status()}, status_code=503)
        return Response(
            {"status": "ready", "database": "ok", "revision": current, "replication": replication.status()}
        )

    @get(
        "/metrics",
        summary="Prometheus metrics",
        media_type="text/plain; version=0.0.4",
        responses=refusals(503, notes={503: "`database_unavailable`: the gauges cannot be read"}),
    )
    async def metrics(self, request: Request[Any, Any, Any]) -> bytes:
        settings = request.app.state.settings
        await gauges.refresh_for_scrape(
            engine_of(request),
            grace=settings.reconcile_grace_seconds,
            cache_seconds=settings.metrics_cache_seconds,
        )
        return render()


class AdminOpsController(Controller):
    path = "/admin/v1"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: operations"]

    @get(
        "/integrity",
        summary="Recompute every balance and check the journal sums to zero",
        responses=refusals(GUARDED),
    )
    async def integrity(self, request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await integrity.check(engine_of(request))

    @get("/audit-log", summary="The audit log, newest first", responses=refusals(GUARDED))
    async def audit_log(
        self,
        request: Request[Any, Any, Any],
        target: Annotated[str | None, Parameter(default=None, max_length=500)],
        limit: Annotated[int, Parameter(ge=1, le=500, default=50)],
        cursor: IdCursor,
        action: Annotated[AuditAction | None, Parameter(default=None)],
        actor: Annotated[
            str | None,
            Parameter(
                default=None,
                max_length=200,
                schema_extra={"pattern": f"(:|^({'|'.join(_BARE_IDENTITIES + _ACTOR_ROLES)})$)"},
                description="an identity as recorded (`finance:3f2a9c1b7d20e8a4`, `finance:alice`), "
                "or a role alone (`finance`)",
            ),
        ],
        since: From,
        until: To,
    ) -> Page:
        before = id_cursor(cursor)
        lo, hi = time_range(since, until)
        identity, role = actor_filter(actor)
        async with read_only(reads_of(request)) as conn:
            rows = await audit.list_entries(
                conn,
                target=target,
                before=before,
                limit=limit + 1,
                action=action,
                actor=identity,
                role=role,
                since=lo,
                until=hi,
            )
        more = len(rows) > limit
        rows = rows[:limit]
        data = [
            {
                "id": str(r.id),
                "at": iso(r.at),
                "actor": r.actor,
                "role": r.role,
                "action": r.action,
                "target": r.target,
                "reason": r.reason,
                "details": r.details,
                "request_id": r.request_id,
            }
            for r in rows
        ]
        return Page(data=data, next_cursor=str(rows[-1].id) if more and rows else None)
