"""Accounts: open, read, fund (deposits), correct (adjustments), control, read the journal.

Every money movement: lock the account row, check the idempotency key, post one
balanced journal transaction, remember the key, write the audit record, commit:
all in one database transaction, so a refused or failed request changes nothing
(the posting itself: `ledger.accounts.movements`; rows to responses:
`ledger.accounts.views`).

Controls (credit limit and metadata changes, freeze, unfreeze) lock the account row
too, so they serialize with every posting; each change is audit-logged with what it
was before and after. A control that would change nothing (the same values, freezing
a frozen account) writes nothing and answers the account as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger import idempotency
from ledger.accounts import movements, repository
from ledger.accounts.schemas import (
    Account,
    AdjustmentRequest,
    Balance,
    CreateAccount,
    DepositRequest,
    FreezeRequest,
    Movement,
    UpdateAccount,
)
from ledger.accounts.views import account_view, balance_view, journal_view, past_balance_view
from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import AccountExists, AccountNotFound, ValidationFailed
from ledger.journal import repository as journal
from ledger.journal.postings import adjustments_account, funding_account
from ledger.metrics import MONEY_MOVEMENTS
from ledger.money import parse_money
from ledger.pagination import id_cursor
from ledger.schemas import Page, check_metadata, iso
from pricing.money import format_amount

# NUMERIC(38, 12) holds |x| < 10^26: refuse larger limits as a 422, not a database error.
MAX_CREDIT_LIMIT = Decimal(10) ** 26


def parse_credit_limit(value: str) -> Decimal:
    credit_limit = parse_money(value, param="credit_limit")
    if credit_limit < 0:
        raise ValidationFailed("credit_limit must not be negative", param="credit_limit")
    if credit_limit >= MAX_CREDIT_LIMIT:
        raise ValidationFailed("credit_limit must be below 10^26", param="credit_limit")
    return credit_limit


def check_reason(reason: str) -> str:
    if not reason.strip():
        raise ValidationFailed("reason must not be blank", param="reason")
    return reason


async def require_locked(conn: AsyncConnection, account_id: str) -> Any:
    row = await repository.lock(conn, account_id)
    if row is None:
        raise AccountNotFound(f"account {account_id!r} does not exist", param="account_id")
    return row


class AccountService:
    def __init__(self, engine: AsyncEngine, *, reads: AsyncEngine | None = None) -> None:
        self.engine = engine
        # The admin surface's lists and histories (LEDGER_READ_DATABASE_URL: a standby); the
        # primary's engine when none is configured. Nothing that writes uses it.
        self.reads = reads or engine

    async def create(self, body: CreateAccount, actor: Actor) -> Account:
        credit_limit = parse_credit_limit(body.credit_limit)
        if body.account_id.startswith("system:"):
            raise ValidationFailed("account ids starting with 'system:' are reserved", param="account_id")
        check_metadata(body.metadata)

        async def work(conn: AsyncConnection) -> Account:
            await journal.ensure_system_accounts(conn, body.currency)
            row = await repository.insert(
                conn,
                account_id=body.account_id,
                currency=body.currency,
                credit_limit=credit_limit,
                metadata=body.metadata,
            )
            if row is None:
                raise AccountExists(f"account {body.account_id!r} already exists", param="account_id")
            await audit.record(
                conn,
                actor=actor.identity,
                role=actor.role,
                action="account.create",
                target=body.account_id,
                reason=None,
                details={"currency": body.currency, "credit_limit": format_amount(credit_limit)},
                request_id=actor.request_id,
            )
            return account_view(row)

        return await transaction(self.engine, work)

    async def get(self, account_id: str) -> Account:
        async with read_only(self.engine) as conn:
            row = await repository.get(conn, account_id)
        if row is None:
            raise AccountNotFound(f"account {account_id!r} does not exist")
        return account_view(row)

    async def balance(self, account_id: str, as_of: datetime | None = None) -> Balance:
        async with read_only(self.engine) as conn:
            row = await repository.get(conn, account_id)
            if row is None:
                raise AccountNotFound(f"account {account_id!r} does not exist")
            if as_of is None:
                return balance_view(row)
            past = await journal.balance_as_of(conn, account_id, as_of)
        return past_balance_view(row, past, as_of)

    async def list(
        self, *, cursor: str | None, limit: int, below_zero: bool = False, review: bool | None = None
    ) -> Page:
        """Accounts by id; `below_zero` only balance < 0; `review` true only those marked for
        review, false the others."""
        async with read_only(self.reads) as conn:
            rows = await repository.list_page(
                conn, after=cursor or "", limit=limit + 1, below_zero=below_zero, review=review
            )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(data=[account_view(r) for r in rows], next_cursor=rows[-1].id if more and rows else None)

    # --- controls --------------------------------------------------------------------

    async def update(self, account_id: str, body: UpdateAccount, actor: Actor) -> Account:
        """Set the credit limit and/or replace the metadata.

        A credit limit below what is held is allowed: it only lowers `available` (maybe
        below zero), so further reservations are refused until holds settle or release;
        nothing already held is taken back.
        """
        reason = check_reason(body.reason)
        if body.credit_limit is msgspec.UNSET and body.metadata is msgspec.UNSET:
            raise ValidationFailed("give credit_limit, metadata or both", param="credit_limit")
        new_limit = None if body.credit_limit is msgspec.UNSET else parse_credit_limit(body.credit_limit)
        new_metadata = None if body.metadata is msgspec.UNSET else body.metadata
        if new_metadata is not None:
            check_metadata(new_metadata)

        async def work(conn: AsyncConnection) -> Account:
            row = await require_locked(conn, account_id)
            limit = row.credit_limit if new_limit is None else new_limit
            metadata = row.metadata if new_metadata is None else new_metadata
            before: dict[str, Any] = {}
            after: dict[str, Any] = {}
            if limit != row.credit_limit:
                before["credit_limit"], after["credit_limit"] = (
                    format_amount(row.credit_limit),
                    format_amount(limit),
                )
            if metadata != row.metadata:
                before["metadata"], after["metadata"] = row.metadata, metadata
            if not after:
                return account_view(row)
            updated = await repository.update_terms(conn, account_id, credit_limit=limit, metadata=metadata)
            await audit.record(
                conn,
                actor=actor.identity,
                role=actor.role,
                action="account.update",
                target=account_id,
                reason=reason,
                details={"before": before, "after": after},
                request_id=actor.request_id,
            )
            return account_view(updated)

        return await transaction(self.engine, work)

    async def freeze(self, account_id: str, body: FreezeRequest, actor: Actor) -> Account:
        """Freeze: new reservations are refused (403 account_frozen); everything else applies.

        The reserve statement reads `frozen_at` from the account row it locks, so a
        reserve waiting on this lock sees the freeze once it commits.
        """
        return await self._set_frozen(account_id, check_reason(body.reason), actor, frozen=True)

    async def unfreeze(self, account_id: str, body: FreezeRequest, actor: Actor) -> Account:
        return await self._set_frozen(account_id, check_reason(body.reason), actor, frozen=False)

    async def _set_frozen(self, account_id: str, reason: str, actor: Actor, *, frozen: bool) -> Account:
        async def work(conn: AsyncConnection) -> Account:
            row = await require_locked(conn, account_id)
            if (row.frozen_at is not None) == frozen:
                return account_view(row)  # already so: idempotent, nothing recorded
            if frozen:
                updated = await repository.freeze(conn, account_id, reason=reason)
                details: dict[str, Any] = {"frozen_at": iso(updated.frozen_at)}
            else:
                updated = await repository.unfreeze(conn, account_id)
                details = {"frozen_at": iso(row.frozen_at), "frozen_reason": row.frozen_reason}
            await audit.record(
                conn,
                actor=actor.identity,
                role=actor.role,
                action="account.freeze" if frozen else "account.unfreeze",
                target=account_id,
                reason=reason,
                details=details,
                request_id=actor.request_id,
            )
            return account_view(updated)

        return await transaction(self.engine, work)

    # --- money movements -----------------------------------------------------------

    async def deposit(self, account_id: str, body: DepositRequest, actor: Actor) -> tuple[Movement, bool]:
        amount = parse_money(body.amount, param="amount")
        if amount <= 0:
            raise ValidationFailed("a deposit amount must be greater than zero", param="amount")
        return await self._move(
            account_id,
            kind="deposit",
            key=body.idempotency_key,
            digest=idempotency.request_hash("deposit", body),
            amount=amount,
            counterpart=funding_account,
            actor=actor,
            reference=body.reference,
            reason=None,
        )

    async def adjust(self, account_id: str, body: AdjustmentRequest, actor: Actor) -> tuple[Movement, bool]:
        amount = parse_money(body.amount, param="amount")
        if amount == 0:
            raise ValidationFailed("an adjustment amount must not be zero", param="amount")
        check_reason(body.reason)
        return await self._move(
            account_id,
            kind="adjustment",
            key=body.idempotency_key,
            digest=idempotency.request_hash("adjustment", body),
            amount=amount,
            counterpart=adjustments_account,
            actor=actor,
            reference=None,
            reason=body.reason,
        )

    async def _move(
        self,
        account_id: str,
        *,
        kind: str,
        key: str,
        digest: str,
        amount: Decimal,
        counterpart: Callable[[str], str],
        actor: Actor,
        reference: str | None,
        reason: str | None,
    ) -> tuple[Movement, bool]:
        async def work(conn: AsyncConnection) -> tuple[Movement, bool]:
            account = await require_locked(conn, account_id)
            return await movements.post(
                conn,
                account_id,
                account,
                kind=kind,
                key=key,
                digest=digest,
                amount=amount,
                counterpart=counterpart,
                actor=actor,
                reference=reference,
                reason=reason,
            )

        result = await transaction(self.engine, work)
        if result[1]:
            MONEY_MOVEMENTS.labels(kind).inc()
        return result

    async def journal(
        self,
        account_id: str,
        *,
        cursor: str | None,
        limit: int,
        kind: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Page:
        """Newest first, filtered by `kind` and [since, until); `balance_after` stays the running balance."""
        before = id_cursor(cursor)
        async with read_only(self.reads) as conn:
            if await repository.get(conn, account_id) is None:
                raise AccountNotFound(f"account {account_id!r} does not exist")
            rows, legs = await journal.account_journal(
                conn, account_id, before=before, limit=limit + 1, kind=kind, since=since, until=until
            )
        more = len(rows) > limit
        rows = rows[:limit]
        data = [journal_view(account_id, r, legs.get(r.id, [])) for r in rows]
        return Page(data=data, next_cursor=str(rows[-1].id) if more and rows else None)
