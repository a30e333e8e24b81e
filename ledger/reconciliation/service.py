"""One reconciliation pass: resolve the holds whose gateway never came back.

Invariants:
- a hold is resolved only while its account row is locked (accounts first, sorted,
  then holds; both SKIP LOCKED), and only if it is still eligible once locked;
  so two passes at once never resolve one hold twice, and a pass never waits on
  (or deadlocks with) the gateway;
- a batch is one database transaction: the holds it resolves, their journal
  transactions and the run row's totals commit together or not at all. A process
  killed mid-batch leaves each hold untouched or fully resolved, and the run row
  agrees with what was committed;
- a hold that fails to resolve (e.g. its model vanished from its price version) is
  rolled back to a savepoint, reported in the run's `errors`, and left untouched;
  the rest of its batch still commits;
- resolution goes through `HoldService.settle_locked` / `release_locked` with the
  `RECONCILER` actor, so `resolved_by` is `reconciler` and a later gateway settle is
  a true-up; the charge uses the largest usage seen (the hold's `usage`), or the
  hold is released in full when none was seen;
- money is Decimal throughout and leaves as decimal strings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgspec
import structlog
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.audit import repository as audit
from ledger.context import RECONCILER, Actor
from ledger.db import RETRYABLE_SQLSTATES, is_unreachable, read_only, sqlstate, transaction
from ledger.errors import LedgerError, ValidationFailed
from ledger.holds.service import HoldService
from ledger.holds.views import parse
from ledger.ids import parse_uuid, uuid7
from ledger.metrics import MONEY_MOVEMENTS
from ledger.reconciliation import repository
from ledger.reconciliation.schemas import (
    TRIGGERS,
    CurrencyTotals,
    ReconciliationRun,
    RunError,
    RunItem,
)
from ledger.schemas import iso
from ledger.settings import Settings
from pricing.money import format_amount

log = structlog.get_logger(__name__)

# Called after each hold is resolved, inside the batch's transaction (tests use it to
# slow a batch down so that a process can be killed in the middle of one).
ResolvedHook = Callable[[AsyncConnection, RunItem], Awaitable[None]]


@dataclass(frozen=True)
class _Money:
    settled: int = 0
    released: int = 0
    charged: Decimal = Decimal(0)
    released_amount: Decimal = Decimal(0)

    def plus(self, item: RunItem) -> _Money:
        charge = Decimal(item.charge) if item.charge is not None else Decimal(0)
        return _Money(
            settled=self.settled + (item.action == "settled"),
            released=self.released + (item.action == "released"),
            charged=self.charged + charge,
            released_amount=self.released_amount + Decimal(item.released),
        )

    def view(self) -> CurrencyTotals:
        return CurrencyTotals(
            settled=self.settled,
            released=self.released,
            charged_amount=format_amount(self.charged),
            released_amount=format_amount(self.released_amount),
        )


@dataclass(frozen=True)
class _Tally:
    """A run's totals so far. Immutable: a batch computes the next tally, committed or not."""

    total: _Money = _Money()
    by_currency: dict[str, _Money] = field(default_factory=dict)
    items: tuple[RunItem, ...] = ()
    errors: tuple[RunError, ...] = ()
    skipped: frozenset[UUID] = frozenset()
    resolved: frozenset[UUID] = frozenset()

    def plus(self, items: list[RunItem], errors: list[RunError], skipped: set[UUID]) -> _Tally:
        total, by_currency = self.total, dict(self.by_currency)
        for item in items:
            total = total.plus(item)
            by_currency[item.currency] = by_currency.get(item.currency, _Money()).plus(item)
        resolved = self.resolved | {UUID(item.hold_id) for item in items}
        return _Tally(
            total=total,
            by_currency=by_currency,
            items=self.items + tuple(items),
            errors=self.errors + tuple(errors),
            skipped=(self.skipped | skipped) - resolved,
            resolved=resolved,
        )

    def as_row(self) -> dict[str, Any]:
        return {
            "settled": self.total.settled,
            "released": self.total.released,
            "skipped": len(self.skipped),
            "charged": self.total.charged,
            "released_amount": self.total.released_amount,
            "by_currency": {c: msgspec.to_builtins(m.view()) for c, m in sorted(self.by_currency.items())},
        }


@dataclass(frozen=True)
class _Batch:
    items: list[RunItem]
    errors: list[RunError]
    skipped: set[UUID]
    gone: int  # candidates no longer eligible once locked (resolved by someone else)


def why(hold: Any, grace: int) -> str:
    """The run's record of why a hold was resolved as it was."""
    if hold.state == "open":
        since = f"open hold expired at {iso(hold.expires_at)} + grace {grace}s"
        seen = "settled at the last checkpoint usage"
    else:
        since = f"interrupted at {iso(hold.interrupted_at)} + grace {grace}s"
        seen = "settled at the largest usage seen (interrupt or last checkpoint)"
    return f"{since}, {seen}" if hold.usage is not None else f"{since}, no usage seen: released in full"


def run_view(row: Any) -> ReconciliationRun:
    return ReconciliationRun(
        run_id=str(row.id),
        status=row.status,
        trigger=row.trigger,
        actor=row.actor,
        grace_seconds=row.grace_seconds,
        started_at=iso(row.started_at),
        finished_at=iso(row.finished_at) if row.finished_at else None,
        settled=row.settled_count,
        released=row.released_count,
        skipped=row.skipped_count,
        charged_amount=format_amount(row.charged_amount),
        released_amount=format_amount(row.released_amount),
        by_currency=msgspec.convert(row.by_currency, dict[str, CurrencyTotals]),
        items=msgspec.convert(row.items, list[RunItem]),
        errors=msgspec.convert(row.errors, list[RunError]),
    )


class ReconciliationService:
    def __init__(
        self,
        engine: AsyncEngine,
        holds: HoldService,
        settings: Settings,
        *,
        on_resolved: ResolvedHook | None = None,
    ) -> None:
        self.engine = engine
        self.holds = holds
        self.settings = settings
        self.grace = settings.reconcile_grace_seconds
        self.batch_size = settings.reconcile_batch_size
        self.on_resolved = on_resolved

    # --- one pass ----------------------------------------------------------------------

    async def run_once(self, trigger: str, actor: Actor) -> dict[str, Any]:
        """Resolve every eligible hold now, in batches; return the run's summary."""
        if trigger not in TRIGGERS:
            raise ValueError(f"unknown reconciliation trigger {trigger!r}")
        run_id = uuid7()

        async def start(conn: AsyncConnection) -> None:
            await repository.insert_run(
                conn, run_id=run_id, trigger=trigger, actor=actor.identity, grace=self.grace
            )

        await transaction(self.engine, start)
        bound = log.bind(run_id=str(run_id), trigger=trigger)
        tally = _Tally()
        failed: set[UUID] = set()  # holds that could not be resolved: not offered again this run
        try:
            while True:
                async with read_only(self.engine) as conn:
                    found = await repository.candidates(
                        conn, grace=self.grace, exclude=sorted(failed), limit=self.batch_size
                    )
                if not found:
                    break
                batch, tally = await self._commit_batch(run_id, found, tally)
                for item in batch.items:
                    MONEY_MOVEMENTS.labels("settle" if item.action == "settled" else "release").inc()
                failed |= {UUID(e.hold_id) for e in batch.errors if e.hold_id}
                if not batch.items and not batch.gone and not batch.errors:
                    break  # all locked elsewhere: no progress to make now (failed ones are excluded)
        except Exception as error:
            await self._fail(run_id, tally, error, actor)
            bound.error("reconcile.failed", error=str(error))
            raise
        summary = await self._finish(run_id, "succeeded", tally, actor)
        busy = summary["settled"] or summary["released"] or summary["skipped"] or summary["errors"]
        (bound.info if busy else bound.debug)(  # an empty pass every few seconds is routine
            "reconcile.finished",
            settled=summary["settled"],
            released=summary["released"],
            skipped=summary["skipped"],
            errors=len(summary["errors"]),
        )
        return summary

    async def _commit_batch(self, run_id: UUID, found: list[Any], tally: _Tally) -> tuple[_Batch, _Tally]:
        """Lock, resolve and record one batch in one transaction (retried whole on a deadlock)."""

        async def work(conn: AsyncConnection) -> tuple[_Batch, _Tally]:
            batch = await self._batch(conn, found)
            after = tally.plus(batch.items, batch.errors, batch.skipped)
            await repository.record_progress(
                conn,
                run_id,
                totals=after.as_row(),
                new_items=[msgspec.to_builtins(i) for i in batch.items],
                errors=[msgspec.to_builtins(e) for e in after.errors],
            )
            return batch, after

        return await transaction(self.engine, work)

    async def _batch(self, conn: AsyncConnection, found: list[Any]) -> _Batch:
        wanted = {row.id: row.account_id for row in found}
        locked = await repository.lock_accounts(conn, list(wanted.values()))
        holds = await repository.lock_eligible_holds(
            conn, hold_ids=sorted(wanted), locked_accounts=locked, grace=self.grace
        )
        got = {hold.id for hold in holds}
        locked_set = set(locked)
        # A candidate whose account could not be locked is skipped; one on a locked account
        # that is no longer eligible (or whose row is locked) is gone or skipped.
        skipped = {h for h, account in wanted.items() if account not in locked_set}
        items: list[RunItem] = []
        errors: list[RunError] = []
        for hold in holds:
            try:
                async with conn.begin_nested():
                    item = await self._resolve(conn, hold)
                    if self.on_resolved is not None:
                        await self.on_resolved(conn, item)
            except LedgerError as error:
                log.error("reconcile.hold_failed", hold_id=str(hold.id), code=error.code, error=error.message)
                errors.append(RunError(message=error.message, hold_id=str(hold.id), code=error.code))
                continue
            except sa_exc.DBAPIError as error:
                if is_unreachable(error) or sqlstate(error) in RETRYABLE_SQLSTATES:
                    raise  # the whole batch is lost (or retried); nothing was committed
                log.error(
                    "reconcile.hold_failed", hold_id=str(hold.id), sqlstate=sqlstate(error), error=str(error)
                )
                errors.append(
                    RunError(message=str(error.orig or error), hold_id=str(hold.id), code=sqlstate(error))
                )
                continue
            items.append(item)
        gone = len(wanted) - len(skipped) - len(got)
        return _Batch(items=items, errors=errors, skipped=skipped, gone=max(gone, 0))

    async def _resolve(self, conn: AsyncConnection, hold: Any) -> RunItem:
        reason = why(hold, self.grace)
        if hold.usage is not None:
            usage = parse(hold.usage)  # pricing.usage.parse_usage, refusals as UsageInvalid
            row = await self.holds.settle_locked(conn, hold, usage, RECONCILER, reason=reason)
            action, charge = "settled", format_amount(row.charged)
        else:
            row = await self.holds.release_locked(conn, hold, RECONCILER, reason=reason)
            action, charge = "released", None
        log.debug("reconcile.resolved", hold_id=str(hold.id), account_id=hold.account_id, action=action)
        return RunItem(
            hold_id=str(hold.id),
            account_id=hold.account_id,
            currency=hold.currency.strip(),
            action=action,  # type: ignore[arg-type]
            why=reason,
            charge=charge,
            released=format_amount(row.released or Decimal(0)),
        )

    async def _finish(self, run_id: UUID, status: str, tally: _Tally, actor: Actor) -> dict[str, Any]:
        errors = [msgspec.to_builtins(e) for e in tally.errors]

        async def work(conn: AsyncConnection) -> Any:
            row = await repository.finish_run(
                conn, run_id, status=status, skipped=len(tally.skipped), errors=errors
            )
            # A person asked for it (API or CLI) and it moved money or failed: the append-only
            # audit log says so, with the run's totals. An empty pass is only a run row.
            if actor.kind == "admin" and row is not None and (tally.items or tally.errors):
                await audit.record(
                    conn,
                    actor=actor.identity,
                    role=actor.role,
                    action="reconciliation.run",
                    target=str(run_id),
                    reason=f"{row.trigger} request",
                    details={
                        "grace_seconds": self.grace,
                        "status": status,
                        "settled": tally.total.settled,
                        "released": tally.total.released,
                        "errors": len(tally.errors),
                    },
                    request_id=actor.request_id,
                )
            return row

        row = await transaction(self.engine, work)
        if row is None:
            raise AssertionError(f"reconciliation run {run_id} was finished twice")
        summary: dict[str, Any] = msgspec.to_builtins(run_view(row))
        return summary

    async def _fail(self, run_id: UUID, tally: _Tally, error: BaseException, actor: Actor) -> None:
        """Best effort: the database may be what failed."""
        failed = replace(tally, errors=(*tally.errors, RunError(message=f"{type(error).__name__}: {error}")))
        try:
            await self._finish(run_id, "failed", failed, actor)
        except Exception as finish_error:
            log.error("reconcile.fail_not_recorded", run_id=str(run_id), error=str(finish_error))

    # --- reads ------------------------------------------------------------------------------

    async def get(self, run_ref: str) -> ReconciliationRun | None:
        run_id = parse_uuid(run_ref)
        if run_id is None:
            return None
        async with read_only(self.engine) as conn:
            row = await repository.get_run(conn, run_id)
        return run_view(row) if row is not None else None

    async def list(
        self, *, cursor: str | None, limit: int, nonempty: bool = False
    ) -> tuple[list[ReconciliationRun], str | None]:
        before = None
        if cursor:
            before = parse_uuid(cursor)
            if before is None:
                raise ValidationFailed("cursor is not a run id from a previous page", param="cursor")
        async with read_only(self.engine) as conn:
            rows = await repository.list_runs(conn, before=before, limit=limit + 1, nonempty=nonempty)
        more = len(rows) > limit
        rows = rows[:limit]
        return [run_view(r) for r in rows], (str(rows[-1].id) if more and rows else None)
