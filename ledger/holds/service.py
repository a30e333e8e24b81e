"""The hold lifecycle: the gateway's hot path, twice per model request.

Invariants:
- every operation locks the hold's account row first (the only lock it waits on),
  then reads the hold fresh, decides, writes, and commits in one transaction;
  concurrent reserves on one account therefore serialize and can never together
  exceed `available`, and settle racing release has exactly one winner;
- a hold is charged at the price version it pinned at reservation;
- usage is charged only within the model's limits in the pinned version (prompt at
  most `max_input_tokens`, completion at most `max_output_tokens` x n): a settle,
  checkpoint or interrupt above them is 422 `model_limit_exceeded` and changes nothing;
- within them the charge follows usage even past the hold (the account may go below
  zero; `overage` shows by how much the charge exceeded the reservation); a charge
  above `LEDGER_MAX_OVERAGE_FACTOR` x the hold is still recorded, but the hold is
  flagged (`overage_flagged`), the account marked for review, a warning logged and
  `ledger_overage_flagged_total` counted;
- usage once seen is never forgiven by a release: releasing a hold that has
  checkpoint or interrupt usage is 409 (settle it instead);
- a settle from the gateway after the reconciler or an admin resolved the hold is
  a true-up: a new transaction for the difference, so the final charge always
  equals the gateway's authoritative usage;
- a refused request raises before commit and changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

import msgspec
import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.accounts.service import available_of
from ledger.audit import repository as audit
from ledger.budgets import repository as budgets
from ledger.budgets import service as budget_rules
from ledger.context import Actor
from ledger.db import engine_conninfo, read_only, transaction
from ledger.errors import (
    AccountFrozen,
    AccountNotFound,
    HoldNotFound,
    HoldStateConflict,
    IdempotencyConflict,
    InsufficientFunds,
    LedgerError,
    ModelNotFound,
    PricingUnavailable,
    UsageInvalid,
)
from ledger.grants import repository as grants
from ledger.holds import repository
from ledger.holds.batch import HoldBatcher
from ledger.holds.postings import moves_money, release_legs, reserve_legs, settle_legs, true_up_legs
from ledger.holds.schemas import Hold, ReserveRequest
from ledger.idempotency import request_hash
from ledger.ids import parse_uuid, uuid7
from ledger.journal import repository as journal
from ledger.journal.postings import Leg, revenue_account
from ledger.metrics import MONEY_MOVEMENTS, OVERAGE_FLAGGED
from ledger.prices.service import PriceService, size, translate_pricing_error
from ledger.schemas import check_metadata, iso
from ledger.settings import Settings
from pricing import errors as pricing_errors
from pricing.document import ModelPrice
from pricing.engine import (
    Charge,
    charge_to_builtins,
    check_usage_limits,
    compute_charge,
    reservation_to_builtins,
)
from pricing.money import format_amount
from pricing.usage import Usage, parse_usage, usage_grows_from

log = structlog.get_logger(__name__)

UNRESOLVED = ("open", "interrupted")
CACHE_LIMIT = 100_000


def _amount(value: Decimal | None) -> str | None:
    return None if value is None else format_amount(value)


def view(row: Any) -> Hold:
    return Hold(
        id=str(row.id),
        account_id=row.account_id,
        idempotency_key=row.idempotency_key,
        state=row.state,
        model=row.model,
        price_version=row.price_version,
        amount=format_amount(row.amount),
        currency=row.currency.strip(),
        reservation=row.reservation,
        ttl_seconds=row.ttl_seconds,
        expires_at=iso(row.expires_at),
        created_at=iso(row.created_at),
        updated_at=iso(row.updated_at),
        metadata=row.metadata,
        usage=row.usage,
        charge=row.charge,
        released=_amount(row.released),
        overage=_amount(row.overage),
        overage_flagged=row.overage_flagged,
        true_up=_amount(row.true_up),
        resolved_by=row.resolved_by,
        resolved_reason=row.resolved_reason,
        resolved_at=iso(row.resolved_at) if row.resolved_at else None,
        interrupted_at=iso(row.interrupted_at) if row.interrupted_at else None,
        budget_key=row.budget_key,
    )


def parse(raw: dict[str, Any], *, param: str = "usage") -> Usage:
    try:
        return parse_usage(raw, param_prefix=param)
    except pricing_errors.UsageInvalid as error:
        raise UsageInvalid(error.message, param=error.param or param) from error


def priced_counts(usage: Usage) -> tuple[int, ...]:
    """What decides the bill: two usages with equal counts are 'the same usage'."""
    return (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_tokens,
        usage.cache_write_tokens,
        usage.cache_write_5m,
        usage.cache_write_1h,
    )


class HoldTerms(NamedTuple):
    """What prices a hold; every field but `state` is immutable once the hold exists."""

    account_id: str
    currency: str
    model: str
    price_version: str
    amount: Decimal
    state: str
    n: int  # completions reserved for: the output limit is the model's max x n
    budget_key: str | None = None


def hold_id_of(value: str) -> UUID:
    hold_id = parse_uuid(value)
    if hold_id is None:
        raise HoldNotFound(f"hold {value!r} does not exist")
    return hold_id


class HoldService:
    def __init__(
        self,
        engine: AsyncEngine,
        prices: PriceService,
        settings: Settings,
        *,
        reads: AsyncEngine | None = None,
    ) -> None:
        self.engine = engine
        # The admin surface's hold lists (LEDGER_READ_DATABASE_URL: a standby); nothing that writes.
        self.reads = (reads or engine).execution_options(isolation_level="AUTOCOMMIT")
        # Single statements (the reserve, the common settle, and every read here) run in
        # autocommit: one round trip each, no BEGIN / COMMIT.
        self.autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.prices = prices
        self.settings = settings
        self.max_overage_factor = Decimal(settings.max_overage_factor)
        self._currencies: dict[str, str] = {}  # account id -> currency (never changes)
        self._versions: dict[str, str | None] = {}  # currency -> last known active price version
        self._terms: dict[UUID, HoldTerms] = {}  # holds reserved here -> what prices them
        # Group commit of the gateway's reserves, settles and releases (ledger.holds.batch).
        self.batcher = HoldBatcher(
            engine_conninfo(engine),
            lanes=settings.batch_lanes,
            pipeline=settings.batch_pipeline,
        )

    async def close(self) -> None:
        """Finish the queued batch and close its connection (at shutdown)."""
        await self.batcher.close()

    # --- reserve -------------------------------------------------------------------

    async def reserve(self, body: ReserveRequest, actor: Actor) -> tuple[Hold, bool]:
        """Reserve: group-committed (`ledger.holds.batch`), or with a budget_key in one
        autocommit statement (see `repository.reserve`).

        The account's currency (immutable) and each currency's active price version are
        cached in-process; the statement re-checks the version under the account lock, and
        when a newer one has become active it writes nothing and we size again with it.
        A pinned version must be pinnable (`PriceService.check_pin`); an identical retry of
        a reserve that was accepted is answered its hold even when the pin has since lapsed.
        """
        check_metadata(body.metadata)
        digest = request_hash("reserve", body)
        budget_key = None if body.budget_key is msgspec.UNSET else body.budget_key
        ttl = body.ttl_seconds or self.settings.default_hold_ttl_seconds
        pinned = body.price_version is not None
        for attempt in range(4):
            currency = await self._currency_of(body.account_id)
            version = body.price_version or await self._active_version(currency)
            try:
                if pinned and attempt == 0:  # a version in effect, or superseded within the grace
                    await self.prices.check_pin(version, self.settings.price_pin_grace_seconds)
                price = await self.prices.model_price(currency=currency, model=body.model, version=version)
                reservation = size(price, body.max_input_tokens, body.max_output_tokens, body.n)
            except LedgerError as error:
                unpriced = isinstance(error, ModelNotFound | PricingUnavailable)
                if unpriced and not pinned and await self._active_version_moved(currency, version):
                    continue  # the cached active version was stale: size again with the new one
                replay = await self._replay(body.account_id, body.idempotency_key, digest)
                if replay is not None:
                    return replay, False
                raise
            breakdown = reservation_to_builtins(reservation)
            params = {
                "id": uuid7(),
                "account_id": body.account_id,
                "key": body.idempotency_key,
                "request_hash": digest,
                "model": body.model,
                "price_version": version,
                "currency": currency,
                "amount": reservation.amount,
                "reservation": breakdown,
                "ttl": ttl,
                "metadata": body.metadata,
                "pinned": pinned,
                "actor": actor.identity,
                "budget_key": budget_key,
            }
            if budget_key is None:
                # The common case: group-committed with its neighbours (ledger.holds.batch).
                row = await self.batcher.submit({"op": "reserve", **params}, body.account_id)
                outcome = row.op_outcome
                if outcome == "created":
                    return self._reserved(row, reservation.n), True
                if outcome == "exists":  # looked up under the account lock: exact
                    if row.request_hash != digest:
                        raise self._key_conflict(body.idempotency_key)
                    return view(row), False
                if outcome == "version":
                    self._versions[currency] = row.op_detail["active_version"]  # size again with it
                    continue
                if outcome == "frozen":
                    raise self._frozen(body.account_id)
                if outcome == "insufficient":
                    detail = row.op_detail
                    available = available_of(
                        Decimal(detail["balance"]),
                        Decimal(detail["credit_limit"]),
                        Decimal(detail["held"]),
                        Decimal(detail["lapsed"]),
                    )
                    raise self._insufficient(reservation.amount, available, currency, breakdown)
                self._currencies.pop(body.account_id, None)
                raise AccountNotFound(f"account {body.account_id!r} does not exist", param="account_id")

            legs = [leg for leg in reserve_legs(body.account_id, reservation.amount) if leg.amount != 0]

            async def work(
                conn: AsyncConnection, params: dict[str, Any] = params, legs: list[Leg] = legs
            ) -> Any:
                return await repository.reserve(conn, legs=legs, **params)

            row = await transaction(self.autocommit, work)
            if row is None:
                self._currencies.pop(body.account_id, None)
                raise AccountNotFound(f"account {body.account_id!r} does not exist", param="account_id")
            if row.existing_id is not None:
                if row.existing_hash != digest:
                    raise self._key_conflict(body.idempotency_key)
                return await self.get(str(row.existing_id)), False
            if row.id is not None:
                return self._reserved(row, reservation.n, budget_key), True
            if row.account_frozen_at is not None:
                # As for 402 below: an identical reserve that won the lock before the freeze
                # answers its replay; anything else is refused.
                replay = await self._replay(body.account_id, body.idempotency_key, digest)
                if replay is not None:
                    return replay, False
                raise self._frozen(body.account_id)
            if not pinned and row.active_version != version:
                self._versions[currency] = row.active_version  # a newer version is active: size again
                continue
            # The key lookup in the statement may predate a concurrent identical reserve that
            # committed while we waited for the account lock (and took the funds): look again.
            replay = await self._replay(body.account_id, body.idempotency_key, digest)
            if replay is not None:
                return replay, False
            available = available_of(
                row.account_balance, row.account_credit_limit, row.account_held, row.account_lapsed
            )
            if budget_key is not None and row.budget_exceeded and available >= reservation.amount:
                # Funds cover it, so the key's budget refused it (insufficient funds, when both
                # refuse, is the one reported: topping up the budget would not be enough).
                raise budget_rules.exceeded(
                    row, budget_key=budget_key, required=reservation.amount, currency=currency
                )
            raise self._insufficient(reservation.amount, available, currency, breakdown)
        raise PricingUnavailable("the active price version kept changing; try again", param="price_version")

    def _reserved(self, row: Any, n: int, budget_key: str | None = None) -> Hold:
        """A hold just written: counted, its terms kept for its settle, its view."""
        MONEY_MOVEMENTS.labels("reserve").inc()
        if len(self._terms) >= CACHE_LIMIT:
            self._terms.clear()
        self._terms[row.id] = HoldTerms(
            row.account_id, row.currency, row.model, row.price_version, row.amount, "open", n, budget_key
        )
        return view(row)

    @staticmethod
    def _frozen(account_id: str) -> AccountFrozen:
        return AccountFrozen(
            f"account {account_id!r} is frozen and takes no new reservations", param="account_id"
        )

    @staticmethod
    def _insufficient(
        required: Decimal, available: Decimal, currency: str, breakdown: dict[str, Any]
    ) -> InsufficientFunds:
        return InsufficientFunds(
            f"reservation of {format_amount(required)} {currency} exceeds available "
            f"{format_amount(available)} {currency}",
            extra={
                "required": format_amount(required),
                "available": format_amount(available),
                "currency": currency,
                "reservation": breakdown,
            },
        )

    @staticmethod
    def _key_conflict(key: str) -> IdempotencyConflict:
        return IdempotencyConflict(
            f"idempotency_key {key!r} was already used with a different request", param="idempotency_key"
        )

    async def _replay(self, account_id: str, key: str, digest: str) -> Hold | None:
        """The hold an identical earlier reserve made (checked before refusing a retry)."""
        async with read_only(self.autocommit) as conn:
            row = await repository.find_by_key(conn, account_id, key)
        if row is None:
            return None
        if row.request_hash != digest:
            raise self._key_conflict(key)
        return await self.get(str(row.id))

    async def _currency_of(self, account_id: str) -> str:
        currency = self._currencies.get(account_id)
        if currency is None:
            async with read_only(self.autocommit) as conn:
                currency = await repository.account_currency(conn, account_id)
            if currency is None:
                raise AccountNotFound(f"account {account_id!r} does not exist", param="account_id")
            if len(self._currencies) >= CACHE_LIMIT:
                self._currencies.clear()
            self._currencies[account_id] = currency
        return currency

    async def _active_version(self, currency: str) -> str:
        version = self._versions.get(currency)
        if version is None:
            async with read_only(self.autocommit) as conn:
                version = await repository.active_version(conn, currency)
            self._versions[currency] = version
        if version is None:
            self._versions.pop(currency, None)
            raise PricingUnavailable(f"no price version is active for {currency}", param="model")
        return version

    async def _active_version_moved(self, currency: str, version: str) -> bool:
        """Re-read the active version; True (and the cache updated) when it is not `version`.

        Asked before refusing a model that the cached active version does not price: a
        newer version (say a refresh that brought the model back) may be active, and
        until a reserve for some other model noticed it, the cache would keep refusing.
        """
        async with read_only(self.autocommit) as conn:
            active = await repository.active_version(conn, currency)
        if active == version:
            return False
        if active is None:
            self._versions.pop(currency, None)
        else:
            self._versions[currency] = active
        return True

    # --- reads ---------------------------------------------------------------------

    async def get(self, hold_ref: str) -> Hold:
        hold_id = hold_id_of(hold_ref)
        async with read_only(self.autocommit) as conn:
            row = await repository.get(conn, hold_id)
        if row is None:
            raise HoldNotFound(f"hold {hold_ref!r} does not exist")
        return view(row)

    async def page(
        self,
        *,
        state: str | None,
        account_id: str | None,
        older_than: datetime | None,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[Hold], str | None]:
        after = parse_uuid(cursor) if cursor else None
        async with read_only(self.reads) as conn:
            rows = await repository.list_page(
                conn, state=state, account_id=account_id, older_than=older_than, after=after, limit=limit + 1
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return [view(r) for r in rows], (str(rows[-1].id) if more and rows else None)

    # --- the locked step shared by every change ----------------------------------------

    async def _locked(self, hold_ref: str, actor: Actor, step: Any, *, kind: str | None = None) -> Hold:
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

    # --- checkpoint and interrupt (no money moves) ------------------------------------------

    async def _grown(self, conn: AsyncConnection, hold: Any, raw: dict[str, Any] | None) -> Usage | None:
        """The new cumulative usage: within the model's limits, and no count smaller than before."""
        if raw is None:
            return None
        usage = parse(raw)
        self._check_limits(await self._price(conn, hold), usage, hold.reservation["n"])
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
            settled = await self._settle_unresolved(hold_id_of(hold_ref), usage, actor)
            if settled is not None:
                return settled

        async def step(conn: AsyncConnection, hold: Any) -> Any:
            return await self.settle_locked(conn, hold, usage, actor, reason=reason)

        return await self._locked(hold_ref, actor, step, kind="settle")

    async def _settle_unresolved(self, hold_id: UUID, usage: Usage, actor: Actor) -> Hold | None:
        """The common case in one autocommit statement: the gateway settles a hold that is
        still open or interrupted. None means the hold is in any other state (or missing):
        the caller then takes the full, transactional path, which decides replay, 409 or
        true-up under the locks."""
        terms: Any = self._terms.pop(hold_id, None)
        if terms is None:
            async with read_only(self.autocommit) as conn:
                terms = await repository.hold_terms(conn, hold_id)
            if terms is None or terms.state not in UNRESOLVED:
                return None
        currency = terms.currency.strip()
        price = await self.prices.model_price(
            currency=currency, model=terms.model, version=terms.price_version
        )
        try:
            check_usage_limits(price, usage, n=terms.n)
        except pricing_errors.ModelLimitExceeded:
            # Refused, but only after the locked path has looked at the hold's state
            # (`terms` may be stale): a hold that is already final answers 409 or its
            # replay, exactly as it would for usage within the limits.
            return None
        try:
            charge = compute_charge(price, usage)
        except pricing_errors.PricingInputError as error:
            raise translate_pricing_error(error) from error
        held, amount = terms.amount, charge.amount
        review = self._over_factor(held, amount, currency)
        if terms.budget_key is None:
            # The common case: group-committed with its neighbours (ledger.holds.batch).
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
                return None  # resolved meanwhile (or missing): the transactional path decides
            MONEY_MOVEMENTS.labels("settle").inc()
            if review is not None:  # committed: report it
                self._report_flagged(row.id, row.account_id, row.currency, row.amount, row.charged, review)
            return view(row)
        # Zero legs included: the statement adds what grants pay to the main leg, then drops zeros.
        legs = settle_legs(terms.account_id, currency, str(hold_id), held, amount)

        async def work(conn: AsyncConnection) -> Any:
            return await repository.settle_unresolved(
                conn,
                hold_id,
                legs=legs,
                currency=currency,
                actor=actor.identity,
                usage=usage.raw,
                charge=charge_to_builtins(charge),
                charged=amount,
                released=max(held - amount, Decimal(0)),
                overage=max(amount - held, Decimal(0)),
                review_reason=review,
                budgeted=terms.budget_key is not None,
            )

        row = await transaction(self.autocommit, work)
        if row is None or row.id is None:
            return None
        MONEY_MOVEMENTS.labels("settle").inc()
        if terms.budget_key is not None and row.budget_alerted:  # committed (autocommit): report it
            budget_rules.report_alert(
                account_id=row.account_id,
                budget_key=row.budget_key,
                amount=row.budget_amount,
                period=row.budget_period,
                threshold=row.budget_alert_threshold,
                spent=row.budget_period_spent,
            )
        if review is not None:  # committed (autocommit): report it
            self._report_flagged(row.id, row.account_id, row.currency, row.amount, row.charged, review)
        return view(row)

    def _over_factor(self, held: Decimal, charged: Decimal, currency: str) -> str | None:
        """The review reason when `charged` exceeds the overage factor x `held`, else None."""
        if charged <= held * self.max_overage_factor:
            return None
        return (
            f"settle charged {format_amount(charged)} {currency} on a hold of {format_amount(held)} "
            f"{currency}: more than LEDGER_MAX_OVERAGE_FACTOR ({self.settings.max_overage_factor}) x the hold"
        )

    @staticmethod
    def _report_flagged(
        hold_id: UUID, account_id: str, currency: str, amount: Decimal, charged: Decimal, reason: str
    ) -> None:
        """The warning and the metric of a flagged settle."""
        OVERAGE_FLAGGED.labels(currency.strip()).inc()
        log.warning(
            "hold.overage_flagged",
            hold_id=str(hold_id),
            account_id=account_id,
            amount=format_amount(amount),
            charged=format_amount(charged),
            currency=currency.strip(),
            reason=reason,
        )

    @staticmethod
    def _check_limits(price: ModelPrice, usage: Usage, n: int) -> None:
        try:
            check_usage_limits(price, usage, n=n)
        except pricing_errors.ModelLimitExceeded as error:
            raise translate_pricing_error(error) from error

    async def _price(self, conn: AsyncConnection, hold: Any) -> ModelPrice:
        doc = await self.prices.document(conn, hold.price_version)
        try:
            return doc.model(hold.model)
        except pricing_errors.ModelNotPriced as error:
            raise translate_pricing_error(error) from error

    async def _post(
        self, conn: AsyncConnection, hold: Any, kind: str, legs: list[Leg], actor: Actor, reason: str | None
    ) -> None:
        """Write the hold's journal transaction, unless every leg is zero (nothing moves)."""
        if moves_money(legs):
            await journal.post(
                conn,
                kind=kind,
                account_id=hold.account_id,
                currency=hold.currency.strip(),
                legs=legs,
                actor=actor.identity,
                hold_id=hold.id,
                reason=reason,
            )

    async def _charge(self, conn: AsyncConnection, hold: Any, usage: Usage, actor: Actor) -> Charge:
        """The charge at the pinned version, refusing usage above the model's limits.

        The reconciler is not re-checked: it settles with checkpoint or interrupt usage,
        which was checked when it was recorded, and refusing it would strand the hold."""
        price = await self._price(conn, hold)
        if actor.kind != "reconciler":
            self._check_limits(price, usage, hold.reservation["n"])
        try:
            return compute_charge(price, usage)
        except pricing_errors.PricingInputError as error:
            raise translate_pricing_error(error) from error

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
            await self._post(conn, hold, "settle", legs, actor, reason)
            await self._budget_move(conn, hold, held_delta=-held, spent_delta=amount)
            await self._audit(conn, actor, "hold.settle", hold, reason, {"charge": format_amount(amount)})
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
        await self._post(conn, hold, "true_up", legs, actor, f"late settle after {hold.resolved_by}")
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
        (admin settle, true-up, reconciler) are rare, and a transaction that then fails
        refuses the whole settle, so the warning can name a settle that did not land;
        the hold's `overage_flagged` is the record."""
        reason = self._over_factor(hold.amount, charged, hold.currency.strip())
        if reason is not None:
            await repository.mark_for_review(conn, hold.account_id, reason=reason, hold_id=hold.id)
            self._report_flagged(hold.id, hold.account_id, hold.currency, hold.amount, charged, reason)
        return reason

    # --- release -------------------------------------------------------------------------

    async def release(self, hold_ref: str, actor: Actor, *, reason: str | None = None) -> Hold:
        if actor.kind == "gateway" and reason is None:
            # The common case, group-committed (ledger.holds.batch); anything but an open or
            # interrupted hold without usage (or one already released) takes the locked path.
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
        await self._post(conn, hold, "release", release_legs(hold.account_id, hold.amount), actor, reason)
        await self._budget_move(conn, hold, held_delta=-hold.amount, spent_delta=Decimal(0))
        await self._audit(conn, actor, "hold.release", hold, reason, {"released": format_amount(hold.amount)})
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

    async def _audit(
        self,
        conn: AsyncConnection,
        actor: Actor,
        action: str,
        hold: Any,
        reason: str | None,
        details: dict[str, Any],
    ) -> None:
        if actor.kind != "admin":
            return  # the gateway's and reconciler's actions are on the hold and the journal
        await audit.record(
            conn,
            actor=actor.identity,
            role=actor.role,
            action=action,
            target=str(hold.id),
            reason=reason,
            details={"account_id": hold.account_id, **details},
            request_id=actor.request_id,
        )
