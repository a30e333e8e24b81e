"""What every part of the hold service shares: its connections, caches, reads and pricing.

`HoldCore` holds the engine (transactions of the locked path), the autocommit engine
(single reads), the group-commit batcher (`ledger.holds.batch`) and the process's
caches: an account's currency and a hold's terms never change once written, and the
active price version per currency is re-checked by the batch under the account lock.

`price_usage` is the one place the hold operations price usage: the price of the hold's
pinned version, its model's limits, the charge, each refusal of the pricing engine
translated into the ledger's errors.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgspec
import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.db import engine_conninfo, read_only
from ledger.errors import HoldNotFound
from ledger.holds import repository
from ledger.holds.batch import HoldBatcher
from ledger.holds.postings import moves_money
from ledger.holds.schemas import Hold
from ledger.holds.views import HoldTerms, hold_id_of, view
from ledger.ids import parse_uuid
from ledger.journal import repository as journal
from ledger.journal.postings import Leg
from ledger.metrics import OVERAGE_FLAGGED
from ledger.prices import notices
from ledger.prices.pricing import charge_usage, check_limits
from ledger.prices.service import PriceService
from ledger.settings import Settings
from pricing.document import ModelPrice
from pricing.engine import Charge
from pricing.money import format_amount
from pricing.usage import Usage

log = structlog.get_logger(__name__)

CACHE_LIMIT = 100_000


class HoldCore:
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
        # Single reads run in autocommit: one round trip each, no BEGIN / COMMIT.
        self.autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.prices = prices
        self.settings = settings
        self.max_overage_factor = Decimal(settings.max_overage_factor)
        self._currencies: dict[str, str] = {}  # account id -> currency (never changes)
        # account id -> its plan revision as last read (re-checked by the batch under the lock)
        self._plans: dict[str, tuple[str, int] | None] = {}
        self._versions: dict[str, str | None] = {}  # currency -> last known active price version
        self._terms: dict[UUID, HoldTerms] = {}  # holds reserved here -> what prices them
        self.batcher = HoldBatcher(
            engine_conninfo(engine), lanes=settings.batch_lanes, pipeline=settings.batch_pipeline
        )

    async def close(self) -> None:
        """Finish the queued batches and close their connections (at shutdown)."""
        await self.batcher.close()

    # --- reads ---------------------------------------------------------------------

    async def get(self, hold_ref: str) -> Hold:
        """One hold, with its model's retirement notice (`ledger.prices.notices`)."""
        hold_id = hold_id_of(hold_ref)
        async with read_only(self.autocommit) as conn:
            row = await repository.get(conn, hold_id)
        if row is None:
            raise HoldNotFound(f"hold {hold_ref!r} does not exist")
        return await self.noticed(view(row), notices.now())

    async def noticed(self, hold: Hold, at: datetime, price: ModelPrice | None = None) -> Hold:
        """`hold` with the notice of its model in its pinned version (`price` if in hand, else
        from the price cache), as judged at `at`; unchanged when the model has no retires_at."""
        if price is None:
            price = await self.prices.model_price(
                currency=hold.currency, model=hold.model, version=hold.price_version
            )
        notice = notices.notice_for(price, at)
        return hold if notice is msgspec.UNSET else msgspec.structs.replace(hold, notice=notice)

    async def page(
        self,
        *,
        state: str | None,
        account_id: str | None,
        older_than: datetime | None,
        cursor: str | None,
        limit: int,
        **filters: Any,
    ) -> tuple[list[Hold], str | None]:
        """A page of holds by id; `filters`: `repository.list_page`'s model, budget_key,
        start, end and metadata."""
        after = parse_uuid(cursor) if cursor else None
        async with read_only(self.reads) as conn:
            rows = await repository.list_page(
                conn,
                state=state,
                account_id=account_id,
                older_than=older_than,
                after=after,
                limit=limit + 1,
                **filters,
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return [view(r) for r in rows], (str(rows[-1].id) if more and rows else None)

    async def get_by_key(self, account_id: str, idempotency_key: str) -> Hold:
        """The hold of the gateway's request id (account + idempotency key); 404 when none.
        The same answer as `get` of that hold, its model's retirement notice included."""
        async with read_only(self.autocommit) as conn:
            row = await repository.get_by_key(conn, account_id, idempotency_key)
        if row is None:
            raise HoldNotFound(f"account {account_id!r} has no hold with this idempotency_key")
        return await self.noticed(view(row), notices.now())

    # --- pricing -------------------------------------------------------------------

    async def price_usage(
        self,
        *,
        currency: str,
        model: str,
        version: str,
        n: int,
        usage: Usage,
        limits: bool = True,
        charge: bool = True,
        plan: tuple[str, int] | None = None,
    ) -> Charge | None:
        """The charge of `usage` at the hold's pinned `version` (None when `charge` is False:
        a checkpoint only checks the limits), from the price cache.

        Usage above the model's limits (prompt at most `max_input_tokens`, completion at
        most `max_output_tokens` x n) is 422 `model_limit_exceeded` unless `limits` is
        False. Refusals are translated in `ledger.prices.pricing`, as for quotes."""
        price = await self.prices.model_price(currency=currency, model=model, version=version, plan=plan)
        if not charge:
            check_limits(price, usage, n)
            return None
        return charge_usage(price, usage, n, limits=limits)

    def over_factor(self, held: Decimal, charged: Decimal, currency: str) -> str | None:
        """The review reason when `charged` exceeds the overage factor x `held`, else None."""
        if charged <= held * self.max_overage_factor:
            return None
        return (
            f"settle charged {format_amount(charged)} {currency} on a hold of {format_amount(held)} "
            f"{currency}: more than LEDGER_MAX_OVERAGE_FACTOR ({self.settings.max_overage_factor}) x the hold"
        )

    @staticmethod
    def report_flagged(
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

    # --- writes of the locked path -------------------------------------------------

    @staticmethod
    async def post(
        conn: AsyncConnection, hold: Any, kind: str, legs: list[Leg], actor: Actor, reason: str | None
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

    @staticmethod
    async def audit(
        conn: AsyncConnection,
        actor: Actor,
        action: str,
        hold: Any,
        reason: str | None,
        details: dict[str, Any],
    ) -> None:
        """An admin's change of a hold, in the audit log (the gateway's and the reconciler's
        are on the hold and the journal)."""
        if actor.kind != "admin":
            return
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
