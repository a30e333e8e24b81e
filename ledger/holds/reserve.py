"""Reserve: the first half of the gateway's hot path, group-committed (`ledger.holds.batch`).

Invariants:
- the reservation is sized at the price version active now (cached per currency, and
  re-checked by the batch under the account lock: a newer one answers 'version' and the
  reservation is sized again with it) or at a pinned version that is still pinnable
  (`PriceService.check_pin`);
- the batch decides under the account's lock: a hold is written only if the key is new,
  the account is not frozen, available (balance - lapsed grants + credit_limit - held)
  covers the amount and, with a budget_key, the key's budget does too; insufficient
  funds wins when both refuse;
- an identical retry answers the hold it made (200, not 201), even once its pin lapsed;
  the same key with another request is 409 `idempotency_conflict`;
- a model past its `retires_at` in the version used is 410 `model_retired` (judged at the
  process's clock, once per request); the answer (201 or its 200 replay) carries the
  model's retirement notice while one is scheduled (`ledger.prices.notices`);
- a refused reserve writes nothing.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec

from ledger.budgets import service as budget_rules
from ledger.context import Actor
from ledger.db import read_only
from ledger.errors import (
    AccountFrozen,
    AccountNotFound,
    IdempotencyConflict,
    InsufficientFunds,
    LedgerError,
    ModelNotFound,
    ModelRetired,
    PricingUnavailable,
)
from ledger.holds import repository
from ledger.holds.core import CACHE_LIMIT, HoldCore
from ledger.holds.schemas import Hold, ReserveRequest
from ledger.holds.views import HoldTerms, plan_of, view
from ledger.idempotency import request_hash
from ledger.ids import uuid7
from ledger.metrics import MONEY_MOVEMENTS
from ledger.money import available_of
from ledger.prices import notices
from ledger.prices.pricing import check_retirement, size
from ledger.schemas import check_metadata
from pricing.engine import reservation_to_builtins
from pricing.money import format_amount


class Reserve(HoldCore):
    async def reserve(self, body: ReserveRequest, actor: Actor) -> tuple[Hold, bool]:
        """Reserve; the hold and whether it was created (False: an identical retry)."""
        check_metadata(body.metadata)
        digest = request_hash("reserve", body)
        budget_key = None if body.budget_key is msgspec.UNSET else body.budget_key
        ttl = body.ttl_seconds or self.settings.default_hold_ttl_seconds
        pinned = body.price_version is not None
        at = notices.now()  # retirement and its notice are judged at this instant
        moved = "version"  # what changed under the last attempt: the price version or the plan
        for attempt in range(4):
            currency = await self._currency_of(body.account_id)
            plan = self._plans.get(body.account_id)  # read with the currency, checked by the batch
            version = body.price_version or await self._active_version(currency)
            try:
                if pinned and attempt == 0:  # a version in effect, or superseded within the grace
                    await self.prices.check_pin(version, self.settings.price_pin_grace_seconds)
                price = await self.prices.model_price(currency=currency, model=body.model, version=version)
                # retirement and the limits (n, output) are the list's, a plan's too: judged
                # before the planned price, so a refused reserve materialises no plan rate
                check_retirement(price, at)
                reservation = size(price, body.max_input_tokens, body.max_output_tokens, body.n)
                if plan is not None:
                    price = await self.prices.planned_price(
                        currency=currency, version=version, plan=plan, list_price=price
                    )
                    reservation = size(price, body.max_input_tokens, body.max_output_tokens, body.n)
            except LedgerError as error:
                unpriced = isinstance(error, ModelNotFound | PricingUnavailable | ModelRetired)
                if unpriced and not pinned and await self._active_version_moved(currency, version):
                    moved = "version"
                    continue  # the cached active version was stale: size again with the new one
                replay = await self._replay(body.account_id, body.idempotency_key, digest)
                if replay is not None:
                    return replay, False
                raise
            breakdown = reservation_to_builtins(reservation)
            operation = {
                "op": "reserve",
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
                "plan_id": None if plan is None else plan[0],
                "plan_revision": None if plan is None else plan[1],
            }
            row = await self.batcher.submit(operation, body.account_id)
            outcome = row.op_outcome
            if outcome == "created":
                return await self.noticed(self._reserved(row, reservation.n), at, price), True
            if outcome == "exists":  # looked up under the account lock: exact
                if row.request_hash != digest:
                    raise self._key_conflict(body.idempotency_key)
                return await self.noticed(view(row), at), False
            if outcome == "version":
                self._versions[currency] = row.op_detail["active_version"]  # size again with it
                moved = "version"
                continue
            if outcome == "plan":  # the account's plan revision changed: size again with it
                detail = row.op_detail
                self._plans[body.account_id] = (
                    None if detail["plan_id"] is None else (detail["plan_id"], detail["plan_revision"])
                )
                moved = "plan"
                continue
            if outcome == "frozen":
                raise AccountFrozen(
                    f"account {body.account_id!r} is frozen and takes no new reservations", param="account_id"
                )
            if outcome == "insufficient":
                detail = row.op_detail
                available = available_of(
                    Decimal(detail["balance"]),
                    Decimal(detail["credit_limit"]),
                    Decimal(detail["held"]),
                    Decimal(detail["lapsed"]),
                )
                raise self._insufficient(reservation.amount, available, currency, breakdown, plan)
            if outcome == "budget":
                assert budget_key is not None
                raise budget_rules.exceeded(
                    row.op_detail,
                    budget_key=budget_key,
                    required=reservation.amount,
                    currency=currency,
                    plan=plan,
                )
            if outcome == "no_account":
                self._currencies.pop(body.account_id, None)
                raise AccountNotFound(f"account {body.account_id!r} does not exist", param="account_id")
            raise RuntimeError(f"ledger_hold_batch answered a reserve with outcome {outcome!r}")
        if moved == "plan":
            raise PricingUnavailable(
                f"the price plan revision of account {body.account_id!r} kept changing; try again",
                param="account_id",
            )
        raise PricingUnavailable(
            f"the active price version of {currency} kept changing; try again", param="price_version"
        )

    def _reserved(self, row: Any, n: int) -> Hold:
        """A hold just written: counted, its terms kept for its settle, its view."""
        MONEY_MOVEMENTS.labels("reserve").inc()
        if len(self._terms) >= CACHE_LIMIT:
            self._terms.clear()
        self._terms[row.id] = HoldTerms(
            row.account_id, row.currency, row.model, row.price_version, row.amount, "open", n, plan_of(row)
        )
        return view(row)

    @staticmethod
    def _insufficient(
        required: Decimal,
        available: Decimal,
        currency: str,
        breakdown: dict[str, Any],
        plan: tuple[str, int] | None = None,
    ) -> InsufficientFunds:
        return InsufficientFunds(
            f"reservation of {format_amount(required)} {currency} exceeds available "
            f"{format_amount(available)} {currency}",
            extra={
                "required": format_amount(required),
                "available": format_amount(available),
                "currency": currency,
                "reservation": breakdown,
                "plan": None if plan is None else {"id": plan[0], "revision": plan[1]},
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
                found = await repository.account_currency(conn, account_id)  # and its plan, one read
            if found is None:
                raise AccountNotFound(f"account {account_id!r} does not exist", param="account_id")
            if len(self._currencies) >= CACHE_LIMIT:
                self._currencies.clear()
                self._plans.clear()
            currency, self._plans[account_id] = found
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
