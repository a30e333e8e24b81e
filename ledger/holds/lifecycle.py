"""A hold after its reserve: checkpoint, interrupt, settle, release, admin settle, true-up.

Two paths per money-moving operation:
- batched (`ledger.holds.batch`): the gateway's settle and release of an open or
  interrupted hold, group-committed; the batch answers 'fallback' for anything else (a
  hold already resolved, a settle that live grants pay, a release of a hold with usage);
- locked (`settle_locked`, `release_locked`): one transaction that locks the hold's
  account row, then the hold, reads it fresh, decides, writes and commits; used for
  what the batch leaves, and by admins, the reconciler and true-ups.

Invariants:
- a hold is charged at the price version it pinned at reservation (`price_usage`);
- usage is charged only within the model's limits in that version: a settle, checkpoint
  or interrupt above them is 422 `model_limit_exceeded` and changes nothing;
- within them the charge follows usage even past the hold (the account may go below
  zero; `overage` shows by how much); a charge above `LEDGER_MAX_OVERAGE_FACTOR` x the
  hold is still recorded, but the hold is flagged, the account marked for review, a
  warning logged and `ledger_overage_flagged_total` counted;
- live grants pay a charge before paid money does (`grants.take`, on the locked path);
- a budgeted hold moves its key's budget when it is resolved (`ledger_budget_move`);
- usage once seen is never forgiven by a release: releasing a hold that has checkpoint
  or interrupt usage is 409 (settle it instead);
- settle racing release has exactly one winner (both decide under the account lock);
- a settle from the gateway after the reconciler or an admin resolved the hold is a
  true-up: a new transaction for the difference, so the final charge always equals the
  gateway's authoritative usage;
- a refused request raises before commit and changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.budgets import repository as budgets
from ledger.budgets import service as budget_rules
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import HoldNotFound, HoldStateConflict, ModelLimitExceeded, UsageInvalid
from ledger.grants import repository as grants
from ledger.holds import repository
from ledger.holds.core import HoldCore
from ledger.holds.postings import release_legs, settle_legs, true_up_legs
from ledger.holds.schemas import Hold
from ledger.holds.views import UNRESOLVED, HoldTerms, hold_id_of, parse, plan_of, priced_counts, view
from ledger.journal.postings import revenue_account
from ledger.metrics import MONEY_MOVEMENTS
from pricing.engine import Charge, charge_to_builtins
from pricing.money import format_amount
from pricing.usage import Usage, usage_grows_from


class Lifecycle(HoldCore):
    async def _locked(self, hold_ref: str, actor: Actor, step: Any, *, kind: str | None = None) -> Hold:
        """Run `step(conn, hold)` in one transaction, the hold's account and then the hold locked."""
        hold_id = hold_id_of(hold_ref)

        async def work(conn: AsyncConnection) -> Hold:
            hold = await repository.lock_hold(conn, hold_id)
            if hold is None:
                raise HoldNotFound(f"hold {hold_ref!r} does not exist")
            return view(await step(conn, hold))

        result = await transaction(self.engine, work)
        if kind:
            MONEY_MOVEMENTS.labels(kind).inc()
        return result

    async def _charge(self, conn: AsyncConnection, hold: Any, usage: Usage, actor: Actor) -> Charge:
        """The charge at the hold's pinned version. The reconciler is not held to the limits:
        it settles with checkpoint or interrupt usage, which was checked when it was
        recorded, and refusing it would strand the hold."""
        charge = await self.price_usage(
            currency=hold.currency.strip(),
            model=hold.model,
            version=hold.price_version,
            n=hold.reservation["n"],
            usage=usage,
            limits=actor.kind != "reconciler",
            plan=plan_of(hold),
        )
        assert charge is not None
        return charge

    # --- checkpoint and interrupt (no money moves) ------------------------------------

    async def _grown(self, conn: AsyncConnection, hold: Any, raw: dict[str, Any] | None) -> Usage | None:
        """The new cumulative usage: within the model's limits, and no count smaller than before."""
        if raw is None:
            return None
        usage = parse(raw)
        await self.price_usage(
            currency=hold.currency.strip(),
            model=hold.model,
            version=hold.price_version,
            n=hold.reservation["n"],
            usage=usage,
            charge=False,
            plan=plan_of(hold),
        )
        if hold.usage is not None:
            shrunk = usage_grows_from(parse(hold.usage), usage)
            if shrunk is not None:
                raise UsageInvalid(
                    f"cumulative usage may only grow: {shrunk} is smaller than the last checkpoint's",
                    param=f"usage.{shrunk}",
                )
        return usage

    async def checkpoint(self, hold_ref: str, raw: dict[str, Any], actor: Actor) -> Hold:
        async def step(conn: AsyncConnection, hold: Any) -> Any:
            if hold.state != "open":
                raise HoldStateConflict(f"hold is {hold.state}; checkpoints are taken only while open")
            usage = await self._grown(conn, hold, raw)
            assert usage is not None
            return await repository.update(conn, hold.id, usage=usage.raw, expires_at="extend")

        return await self._locked(hold_ref, actor, step)

    async def interrupt(self, hold_ref: str, raw: dict[str, Any] | None, actor: Actor) -> Hold:
        async def step(conn: AsyncConnection, hold: Any) -> Any:
            if hold.state not in UNRESOLVED:
                raise HoldStateConflict(f"hold is already {hold.state}")
            usage = await self._grown(conn, hold, raw)
            changes: dict[str, Any] = {"state": "interrupted"}
            if hold.state == "open":
                changes["interrupted_at"] = "now"
            if usage is not None:
                changes["usage"] = usage.raw
            return await repository.update(conn, hold.id, **changes)

        return await self._locked(hold_ref, actor, step)

    # --- settle ----------------------------------------------------------------------

    async def settle(
        self, hold_ref: str, raw: dict[str, Any], actor: Actor, *, reason: str | None = None
    ) -> Hold:
        usage = parse(raw)
        if actor.kind == "gateway":
            settled = await self._settle_batched(hold_id_of(hold_ref), usage, actor)
            if settled is not None:
                return settled

        async def step(conn: AsyncConnection, hold: Any) -> Any:
            return await self.settle_locked(conn, hold, usage, actor, reason=reason)

        return await self._locked(hold_ref, actor, step, kind="settle")

    async def _settle_batched(self, hold_id: UUID, usage: Usage, actor: Actor) -> Hold | None:
        """The gateway settles a hold that is still open or interrupted, group-committed.

        None: the locked path decides (the hold is in any other state or missing, live
        grants pay the charge, or the usage is above the model's limits: refused there,
        but only after it has looked at the hold's state, since a hold that is already
        final answers 409 or its replay, as it would for usage within the limits)."""
        terms: Any = self._terms.pop(hold_id, None)
        if terms is None:
            async with read_only(self.autocommit) as conn:
                terms = await repository.hold_terms(conn, hold_id)
            if terms is None or terms.state not in UNRESOLVED:
                return None
        currency = terms.currency.strip()
        plan = terms.plan if isinstance(terms, HoldTerms) else plan_of(terms)
        try:
            charge = await self.price_usage(
                currency=currency,
                model=terms.model,
                version=terms.price_version,
                n=terms.n,
                usage=usage,
                plan=plan,
            )
        except ModelLimitExceeded:
            return None
        assert charge is not None
        held, amount = terms.amount, charge.amount
        review = self.over_factor(held, amount, currency)
        row = await self.batcher.submit(
            {
                "op": "settle",
                "id": hold_id,
                "held": held,
                "charged": amount,
                "usage": usage.raw,
                "charge": charge_to_builtins(charge),
                "flagged": review is not None,
                "review_reason": review,
                "actor": actor.identity,
                "revenue": revenue_account(currency, str(hold_id)),
            },
            terms.account_id,
        )
        if row.op_outcome != "settled":
            return None
        MONEY_MOVEMENTS.labels("settle").inc()
        if row.op_detail is not None:  # committed: report the budget alert it recorded
            budget_rules.report_movement(row.op_detail["budget_alert"])
        if review is not None:
            self.report_flagged(row.id, row.account_id, row.currency, row.amount, row.charged, review)
        return view(row)

    async def settle_locked(
        self, conn: AsyncConnection, hold: Any, usage: Usage, actor: Actor, *, reason: str | None
    ) -> Any:
        """Settle (or true up) a hold whose account row the caller has locked."""
        gateway = actor.kind == "gateway"
        if hold.state in UNRESOLVED:
            charge = await self._charge(conn, hold, usage, actor)
            held, amount = hold.amount, charge.amount
            takes = await grants.take(conn, hold.account_id, amount)
            legs = settle_legs(hold.account_id, hold.currency.strip(), str(hold.id), held, amount, takes)
            await self.post(conn, hold, "settle", legs, actor, reason)
            await self._budget_move(conn, hold, held_delta=-held, spent_delta=amount)
            await self.audit(conn, actor, "hold.settle", hold, reason, {"charge": format_amount(amount)})
            review = await self._flag(conn, hold, amount)
            return await repository.update(
                conn,
                hold.id,
                state="settled",
                usage=usage.raw,
                gateway_usage=usage.raw if gateway else None,
                charge=charge_to_builtins(charge),
                charged=amount,
                released=max(held - amount, Decimal(0)),
                overage=max(amount - held, Decimal(0)),
                overage_flagged=review is not None,
                resolved_by=actor.kind,
                resolved_reason=reason,
                resolved_at="now",
            )
        if not gateway:
            raise HoldStateConflict(f"hold is already {hold.state} (resolved by {hold.resolved_by})")
        if hold.gateway_usage is not None:
            if priced_counts(parse(hold.gateway_usage)) == priced_counts(usage):
                return hold  # the same settle again: the same result
            raise HoldStateConflict("hold was already settled with different usage")
        if hold.state == "released" and hold.resolved_by == "gateway":
            raise HoldStateConflict("hold was released by the gateway; it cannot be settled")
        # Resolved by the reconciler or an admin: apply the authoritative usage as a true-up.
        charge = await self._charge(conn, hold, usage, actor)
        flagged = await self._flag(conn, hold, charge.amount) is not None
        previous = hold.charged or Decimal(0)
        difference = charge.amount - previous
        # A positive difference is charged like a settle (grants first); a refund goes to paid.
        takes = await grants.take(conn, hold.account_id, difference)
        legs = true_up_legs(hold.account_id, hold.currency.strip(), str(hold.id), difference, takes)
        await self.post(conn, hold, "true_up", legs, actor, f"late settle after {hold.resolved_by}")
        # The difference corrects the spend of the moment the hold was resolved.
        await self._budget_move(
            conn, hold, held_delta=Decimal(0), spent_delta=difference, at=hold.resolved_at
        )
        return await repository.update(
            conn,
            hold.id,
            state="settled",
            usage=usage.raw,
            gateway_usage=usage.raw,
            charge=charge_to_builtins(charge),
            charged=charge.amount,
            overage=max(charge.amount - hold.amount, Decimal(0)),
            overage_flagged=hold.overage_flagged or flagged,  # never cleared
            true_up=(hold.true_up or Decimal(0)) + difference,
        )

    @staticmethod
    async def _budget_move(
        conn: AsyncConnection,
        hold: Any,
        *,
        held_delta: Decimal,
        spent_delta: Decimal,
        at: datetime | None = None,
    ) -> None:
        """Move the hold's budget key (if it named one), under the account lock the caller holds.

        An alert is reported inside the transaction, as `_flag` does (these paths are rare);
        `budgets.alerted_at` is the record."""
        if hold.budget_key is None:
            return
        row = await budgets.move(
            conn,
            account_id=hold.account_id,
            budget_key=hold.budget_key,
            held_delta=held_delta,
            spent_delta=spent_delta,
            spent_at=at,
        )
        budget_rules.report_movement(row)

    async def _flag(self, conn: AsyncConnection, hold: Any, charged: Decimal) -> str | None:
        """Mark the account for review when `charged` is over the factor; the reason, or None.

        Reported (warning, metric) here, inside the caller's transaction: these paths
        (admin settle, true-up, reconciler, grants) are rare, and a transaction that then
        fails refuses the whole settle, so the warning can name a settle that did not
        land; the hold's `overage_flagged` is the record."""
        reason = self.over_factor(hold.amount, charged, hold.currency.strip())
        if reason is not None:
            await repository.mark_for_review(conn, hold.account_id, reason=reason, hold_id=hold.id)
            self.report_flagged(hold.id, hold.account_id, hold.currency, hold.amount, charged, reason)
        return reason

    # --- release -------------------------------------------------------------------------

    async def release(self, hold_ref: str, actor: Actor, *, reason: str | None = None) -> Hold:
        if actor.kind == "gateway" and reason is None:
            hold_id = hold_id_of(hold_ref)
            terms = self._terms.get(hold_id)  # its account picks the lane; unknown here: any lane
            lane_key = terms.account_id if terms is not None else str(hold_id)
            row = await self.batcher.submit(
                {"op": "release", "id": hold_id, "actor": actor.identity}, lane_key
            )
            if row.op_outcome == "released":
                MONEY_MOVEMENTS.labels("release").inc()
                self._terms.pop(hold_id, None)
                return view(row)
            if row.op_outcome == "exists":
                return view(row)  # releasing twice is not an error

        async def step(conn: AsyncConnection, hold: Any) -> Any:
            return await self.release_locked(conn, hold, actor, reason=reason)

        return await self._locked(hold_ref, actor, step, kind="release")

    async def release_locked(
        self, conn: AsyncConnection, hold: Any, actor: Actor, *, reason: str | None
    ) -> Any:
        if hold.state == "released":
            return hold  # releasing twice is not an error
        if hold.state == "settled":
            raise HoldStateConflict("hold is already settled; it cannot be released")
        if hold.usage is not None:
            # Usage was reported (a checkpoint or an interrupt): releasing would forgive
            # tokens that were served. The reconciler never gets here (it settles such holds).
            how = (
                "settle it instead (POST /admin/v1/holds/{id}/settle without usage settles at the largest "
                "usage seen); to forgive the charge, settle and then post an adjustment"
                if actor.kind == "admin"
                else "settle it instead"
            )
            raise HoldStateConflict(
                f"usage was already seen for this hold; releasing would forgive it: {how}"
            )
        await self.post(conn, hold, "release", release_legs(hold.account_id, hold.amount), actor, reason)
        await self._budget_move(conn, hold, held_delta=-hold.amount, spent_delta=Decimal(0))
        await self.audit(conn, actor, "hold.release", hold, reason, {"released": format_amount(hold.amount)})
        return await repository.update(
            conn,
            hold.id,
            state="released",
            released=hold.amount,
            resolved_by=actor.kind,
            resolved_reason=reason,
            resolved_at="now",
        )

    # --- admin ------------------------------------------------------------------------------

    async def admin_settle(
        self, hold_ref: str, raw: dict[str, Any] | None, actor: Actor, *, reason: str
    ) -> Hold:
        given = parse(raw) if raw is not None else None

        async def step(conn: AsyncConnection, hold: Any) -> Any:
            if hold.state not in UNRESOLVED:
                raise HoldStateConflict(f"hold is already {hold.state}; use an adjustment to correct it")
            usage = given or (parse(hold.usage) if hold.usage is not None else None)
            if usage is None:
                raise UsageInvalid(
                    "no usage was seen for this hold: give usage, or release it", param="usage"
                )
            return await self.settle_locked(conn, hold, usage, actor, reason=reason)

        return await self._locked(hold_ref, actor, step, kind="settle")
