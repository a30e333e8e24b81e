"""The jobs, and the thin Dramatiq actors that run them.

Each job body opens nothing of its own: it runs on this process's runtime (one
event loop, one cached engine per database URL), calls a ledger service, records
its result in `job_runs` (which the API exports as `ledger_job_runs_total`, wherever
the job ran) and refreshes the hold gauges. Every job is idempotent, so a retry, a duplicate tick or a
redelivered message is harmless:

- `reconcile`: one `ReconciliationService.run_once` pass (its own run row too);
- `refresh_prices`: `ledger prices refresh` (publishes only if the sources changed
  since its last refresh; a version published by hand since then is never published
  over: the run logs a warning and records the skip, ok; rate moves past
  LEDGER_PRICE_REFRESH_MAX_FACTOR are refused, logged at ERROR, not ok);
- `check_integrity`: the check behind GET /admin/v1/integrity; sets
  `ledger_integrity_ok` and logs any mismatch at ERROR level;
- `expire_grants`: one `GrantService.expire_once` pass (`ledger expire-grants`): posts
  each expired grant's remainder out through the journal; counts in its job run.
- `deliver_alerts`: one pass over the low-balance alert outbox
  (`ledger.alerts.delivery.deliver_pending`: signed POSTs, each attempt recorded,
  retries with backoff). It runs every LEDGER_ALERT_INTERVAL_SECONDS, so a pass that
  found nothing due records no `job_runs` row (the table would otherwise grow by a row
  every few seconds for nothing).

A job whose previous execution still runs (anywhere: its advisory lock is held)
skips instead of overlapping it. A pass that did nothing (`did_something`) logs
`job.finished` at debug; one that did something, or failed, logs it at info with its summary.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dramatiq
import msgspec
import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.alerts.delivery import deliver_pending
from ledger.context import Actor
from ledger.db import transaction
from ledger.grants.service import GrantService
from ledger.holds.service import HoldService
from ledger.integrity import service as integrity
from ledger.jobs import repository as job_runs
from ledger.metrics import JOB_EVENTS, set_integrity
from ledger.prices import commands as price_commands
from ledger.prices.service import PriceService
from ledger.reconciliation import gauges
from ledger.reconciliation.schemas import Trigger
from ledger.reconciliation.service import ReconciliationService
from ledger.settings import Settings
from workers.broker import MAX_RETRIES, QUEUE, TIME_LIMIT_MS
from workers.locks import job_lock
from workers.runtime import runtime

log = structlog.get_logger(__name__)

JOBS = ("reconcile", "refresh_prices", "check_integrity", "expire_grants", "deliver_alerts")
JobMessage = Callable[[], None]
Body = Callable[[AsyncEngine], Awaitable[tuple[bool, dict[str, Any]]]]


@dataclass(frozen=True)
class JobContext:
    """What every job needs: the settings, the resolved database URL, and who triggers it."""

    settings: Settings
    database_url: str
    trigger: Trigger = "schedule"

    @property
    def actor(self) -> Actor:
        """Recorded on reconciliation runs and price versions: `scheduler` or `embedded`."""
        return Actor(identity=self.trigger if self.trigger != "schedule" else "scheduler", role="admin")


def run_job(ctx: JobContext, job: str, body: Body, *, record_idle: bool = True) -> dict[str, Any]:
    """Run one job body under its overlap lock; record and count the outcome.

    `record_idle` False: a run whose summary says `idle` (nothing to do) is not recorded.
    """
    bound = log.bind(job=job)
    with job_lock(ctx.database_url, job) as acquired:
        if not acquired:
            bound.info("job.skipped", why="its previous run still holds the job lock")
            JOB_EVENTS.labels(job, "skipped").inc()
            return {"job": job, "skipped": True}
        started = datetime.now(UTC)
        try:
            ok, summary = runtime().call(ctx.database_url, body)
        except Exception as error:
            bound.error("job.failed", error=f"{type(error).__name__}: {error}")
            _record(ctx, job, started, ok=False, summary={"error": f"{type(error).__name__}: {error}"})
            raise  # Dramatiq's Retries middleware retries it with backoff
        idle = not record_idle and bool(summary.get("idle"))
        if not idle:
            _record(ctx, job, started, ok=ok, summary=summary)
        _refresh_gauges(ctx)
        if ok and not did_something(job, summary):
            bound.debug("job.finished", ok=ok, summary=summary)
        elif job == "check_integrity":  # its report can be long; a mismatch is logged at ERROR
            bound.info("job.finished", ok=ok)
        else:
            bound.info("job.finished", ok=ok, summary=summary)
        return {"job": job, "skipped": False, "ok": ok, "summary": summary}


def did_something(job: str, summary: dict[str, Any]) -> bool:
    """Whether a pass changed or found anything worth a line at info (else it logs at debug).

    An empty reconcile (nothing settled, released, skipped or failed), grant expiry (nothing
    expired or skipped), alert delivery (nothing attempted) or price refresh (sources
    unchanged) is routine every few seconds; an integrity check always reports.
    """
    if job == "reconcile":
        return any(summary.get(key) for key in ("settled", "released", "skipped", "errors"))
    if job == "expire_grants":
        return bool(summary.get("expired") or summary.get("skipped"))
    if job == "deliver_alerts":
        return not summary.get("idle")
    if job == "refresh_prices":
        return summary.get("outcome") != "unchanged"
    return True


def _record(ctx: JobContext, job: str, started: datetime, *, ok: bool, summary: dict[str, Any]) -> None:
    async def write(engine: AsyncEngine) -> None:
        async def work(conn: AsyncConnection) -> None:
            await job_runs.record(
                conn, job=job, started_at=started, finished_at=datetime.now(UTC), ok=ok, summary=summary
            )

        await transaction(engine, work)

    try:
        runtime().call(ctx.database_url, write)
    except Exception as error:  # the result is logged either way; the database may be what failed
        log.error("job.record_failed", job=job, error=str(error))


def _refresh_gauges(ctx: JobContext) -> None:
    try:
        runtime().call(
            ctx.database_url,
            lambda engine: gauges.refresh(engine, grace=ctx.settings.reconcile_grace_seconds),
        )
    except Exception as error:
        log.warning("gauges.refresh_failed", error=str(error))


# --- the job bodies ---------------------------------------------------------------------------


def reconcile(ctx: JobContext) -> dict[str, Any]:
    async def body(engine: AsyncEngine) -> tuple[bool, dict[str, Any]]:
        holds = HoldService(engine, PriceService(engine), ctx.settings)
        summary = await ReconciliationService(engine, holds, ctx.settings).run_once(ctx.trigger, ctx.actor)
        brief = {
            k: summary[k]
            for k in (
                "run_id",
                "status",
                "settled",
                "released",
                "skipped",
                "charged_amount",
                "released_amount",
            )
        }
        brief["errors"] = len(summary["errors"])
        return summary["status"] == "succeeded", brief

    return run_job(ctx, "reconcile", body)


def refresh_prices(ctx: JobContext) -> dict[str, Any]:
    async def body(engine: AsyncEngine) -> tuple[bool, dict[str, Any]]:
        try:
            factor = price_commands.refresh_factor(ctx.settings, None)
        except SystemExit as refused:  # an unusable LEDGER_PRICE_REFRESH_MAX_FACTOR: no retry helps
            log.error("prices.refresh_misconfigured", error=str(refused))
            return False, {"error": str(refused)}
        result = await price_commands.refresh(
            ctx.settings, ctx.database_url, force=False, factor=factor, actor=ctx.actor
        )
        summary: dict[str, Any] = msgspec.to_builtins(result)
        if result.outcome == "refuse_newer_version":
            summary["skipped"] = True
            log.warning("prices.refresh_skipped", newer_version=result.newer_version, reason=result.reason)
        if result.outcome == "refuse_rate_move":
            log.error("prices.refresh_refused", refused=len(result.refused_changes), reason=result.reason)
        return result.outcome != "refuse_rate_move", summary

    return run_job(ctx, "refresh_prices", body)


def check_integrity(ctx: JobContext) -> dict[str, Any]:
    async def body(engine: AsyncEngine) -> tuple[bool, dict[str, Any]]:
        report = await integrity.check(engine)
        ok = bool(report["ok"])
        set_integrity(ok, datetime.now(UTC).timestamp())
        if not ok:
            log.error(
                "integrity.mismatch",
                account_mismatches=report["account_mismatches"],
                hold_mismatches=report["hold_mismatches"],
                unbalanced_transactions=report["unbalanced_transactions"],
                totals=report["totals"],
            )
        return ok, report

    return run_job(ctx, "check_integrity", body)


def expire_grants(ctx: JobContext) -> dict[str, Any]:
    async def body(engine: AsyncEngine) -> tuple[bool, dict[str, Any]]:
        return True, await GrantService(engine).expire_once(ctx.actor)

    return run_job(ctx, "expire_grants", body)


def deliver_alerts(ctx: JobContext) -> dict[str, Any]:
    async def body(engine: AsyncEngine) -> tuple[bool, dict[str, Any]]:
        summary = await deliver_pending(engine, ctx.settings)
        summary["idle"] = summary["delivered"] + summary["retrying"] + summary["failed"] == 0
        if not summary["sending"]:
            log.debug("alerts.not_sending", why="LEDGER_WEBHOOK_SECRET is not set")
        # A webhook that answers badly is the receiver's failure, recorded per event; the pass is ok.
        return True, summary

    return run_job(ctx, "deliver_alerts", body, record_idle=False)


BODIES: dict[str, Callable[[JobContext], dict[str, Any]]] = {
    "reconcile": reconcile,
    "refresh_prices": refresh_prices,
    "check_integrity": check_integrity,
    "expire_grants": expire_grants,
    "deliver_alerts": deliver_alerts,
}


# --- the actors -------------------------------------------------------------------------------------

_lock = threading.Lock()
_declared: dict[int, tuple[JobContext, dict[str, dramatiq.Actor[[], None]]]] = {}


def _message(name: str, job: Callable[[JobContext], dict[str, Any]], ctx: JobContext) -> JobMessage:
    def message() -> None:
        job(ctx)  # the outcome is recorded in job_runs and logged; a message has no result

    message.__name__ = message.__qualname__ = name
    return message


def register_actors(broker: dramatiq.Broker, ctx: JobContext) -> dict[str, dramatiq.Actor[[], None]]:
    """Declare the job actors on `broker`, bound to `ctx` (idempotent per broker and context)."""
    with _lock:
        known = _declared.get(id(broker))
        if known is not None and known[0] == ctx:
            return known[1]
        actors: dict[str, dramatiq.Actor[[], None]] = {}
        for name, job in BODIES.items():
            declare = dramatiq.actor(
                broker=broker,
                actor_name=name,
                queue_name=QUEUE,
                max_retries=MAX_RETRIES,
                time_limit=TIME_LIMIT_MS,
            )
            actors[name] = declare(_message(name, job, ctx))
        _declared[id(broker)] = (ctx, actors)
        return actors
