"""Price versions: publish (immutable), resolve the active or pinned one, quote.

`PriceService` is what the API, the console, the commands and the holds use. It is
the catalog of published versions (`ledger.prices.catalog`: the active-version and pin
rules, the document cache, why a model is unpriced), plus publishing
(`ledger.prices.publishing`: by hand, by refresh, the first-start seed, all under the
publishing lock) and quoting, below. The engine's refusals become ledger errors in one
place, `ledger.prices.pricing`.
"""

from __future__ import annotations

from decimal import Decimal

import msgspec

from ledger.context import Actor
from ledger.db import read_only
from ledger.errors import AccountNotFound, ValidationFailed
from ledger.holds.repository import account_currency
from ledger.plans.schemas import PlanRef
from ledger.prices import notices, publishing
from ledger.prices.catalog import PriceCatalog
from ledger.prices.pricing import charge, check_retirement, size
from ledger.prices.schemas import ChargeQuote, PriceVersion, PublishResult, QuoteRequest, ReservationQuote
from pricing.document import PriceDocument
from pricing.engine import charge_to_builtins, reservation_to_builtins


class PriceService(PriceCatalog):
    # --- publishing (rules: ledger.prices.publishing) -------------------------------

    async def publish(self, doc: PriceDocument, actor: Actor, *, replace: bool = False) -> PriceVersion:
        """Publish `doc` by hand (API or `ledger prices publish`)."""
        return await publishing.publish(self.engine, doc, actor, replace=replace)

    async def publish_raw(self, raw: bytes, actor: Actor, *, replace: bool = False) -> PriceVersion:
        """Publish a request body: a price document plus an optional `"replace": true|false`."""
        return await publishing.publish_raw(self.engine, raw, actor, replace=replace)

    async def refresh(
        self,
        doc: PriceDocument,
        actor: Actor,
        *,
        max_factor: Decimal,
        force: bool = False,
        dry_run: bool = False,
    ) -> PublishResult:
        """Publish what the sources produce (`doc`) by the refresh rule; a dry run writes nothing."""
        return await publishing.refresh(
            self.engine, doc, actor, max_factor=max_factor, force=force, dry_run=dry_run
        )

    async def has_versions(self) -> bool:
        return await publishing.has_versions(self.engine)

    async def seed_if_empty(self, doc: PriceDocument, actor: Actor) -> PriceVersion | None:
        """Publish `doc` only when no version exists at all (first start of a new database)."""
        return await publishing.seed_if_empty(self.engine, doc, actor)

    # --- quoting -----------------------------------------------------------------

    async def quote(
        self, body: QuoteRequest, *, pin_grace_seconds: int | None = None
    ) -> ChargeQuote | ReservationQuote:
        """Price a usage or size a reservation. With `pin_grace_seconds` (the gateway's
        quotes) a pinned version must be one a reserve could pin (`check_pin`); without it
        (finance's quotes) any published version may be quoted, a future one included."""
        # `n` may come with usage: the completion limit, as at settle, is n x the model's output.
        sizing = (body.max_output_tokens, body.max_input_tokens)
        if body.usage is not None and any(v is not None for v in sizing):
            raise ValidationFailed("give either usage or the reservation fields, not both", param="usage")
        if body.price_version is not None and pin_grace_seconds is not None:
            await self.check_pin(body.price_version, pin_grace_seconds)
        currency, plan = body.currency or "USD", None
        shown: PlanRef | msgspec.UnsetType | None = msgspec.UNSET
        async with read_only(self.engine) as conn:
            if body.account_id is not None:  # the account's currency and current plan revision
                found = await account_currency(conn, body.account_id)
                if found is None:
                    raise AccountNotFound(f"account {body.account_id!r} does not exist", param="account_id")
                currency, plan = found
                if body.currency is not None and body.currency != currency:
                    raise ValidationFailed(
                        f"account {body.account_id} is in {currency}, not {body.currency}: omit currency "
                        "to quote in the account's",
                        param="currency",
                    )
                shown = None if plan is None else PlanRef(id=plan[0], revision=plan[1])
            version, price = await self.resolve(
                conn, currency=currency, model=body.model, pinned=body.price_version
            )
        at = notices.now()
        # retirement and the limits are the list's (a plan keeps them): judged on the list
        # price first, so a refused quote materialises no plan rate
        check_retirement(price, at)  # 410 once the model is retired, either kind of quote
        if plan is not None:
            if body.usage is None:
                size(price, body.max_input_tokens, body.max_output_tokens, body.n)
            else:
                charge(price, body.usage, body.n or 1)
            price = await self.planned_price(currency=currency, version=version, plan=plan, list_price=price)
        notice = notices.notice_for(price, at)
        if body.usage is not None:
            cost = charge(price, body.usage, body.n or 1)  # a settle would refuse it too
            return ChargeQuote(
                model=body.model,
                price_version=version,
                charge=charge_to_builtins(cost),
                notice=notice,
                plan=shown,
            )
        reservation = size(price, body.max_input_tokens, body.max_output_tokens, body.n)
        return ReservationQuote(
            model=body.model,
            price_version=version,
            reservation=reservation_to_builtins(reservation),
            notice=notice,
            plan=shown,
        )
