"""Grants: finance gives an account credit; settles consume it; the expiry job posts out the rest.

- Granting (one database transaction, under the account's row lock): the idempotency
  key is checked (same key and body: the same grant; another body: 409), then the grant
  row and its `grant` journal transaction (system:grants:<CUR> -A, account/grant:<id> +A)
  and the audit record are written together. A refused grant writes nothing.
- Consumption (`ledger.holds`): a charge takes from live grants in order (priority,
  then earliest expiry, then grant id), each up to its remaining, then from paid (main).
- Expiry (`expire_once`): each grant whose expires_at has passed and that has money left
  gets a `grant_expiry` transaction (account/grant:<id> -R, system:grants:<CUR> +R) and
  an audit record. Batches lock accounts then grants with SKIP LOCKED and re-check
  under the locks, so two passes never expire one grant twice, and the database refuses
  an expiry that leaves anything in the book (migration 0013).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger import idempotency
from ledger.accounts import repository as accounts
from ledger.accounts.service import require_locked
from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import AccountNotFound, IdempotencyConflict, ValidationFailed
from ledger.grants import repository
from ledger.grants.schemas import Grant, GrantRequest, GrantState
from ledger.ids import parse_uuid, uuid7
from ledger.journal import repository as journal
from ledger.journal.postings import Leg, grant_book, grants_account
from ledger.metrics import MONEY_MOVEMENTS
from ledger.money import check_resulting_balance, parse_money
from ledger.schemas import Page, iso
from pricing.money import EXACT, format_amount

log = structlog.get_logger(__name__)

EXPIRY_BATCH = 200


def grant_state(row: Any, now: datetime) -> GrantState:
    if row.expires_at <= now:
        return "expired"
    return "consumed" if row.remaining == 0 else "active"


def grant_view(row: Any, now: datetime | None = None) -> Grant:
    consumed = EXACT.subtract(EXACT.subtract(row.amount, row.remaining), row.expired)
    return Grant(
        grant_id=str(row.id),
        account_id=row.account_id,
        currency=row.currency.strip(),
        amount=format_amount(row.amount),
        remaining=format_amount(row.remaining),
        consumed=format_amount(consumed),
        expired=format_amount(row.expired),
        state=grant_state(row, now or datetime.now(UTC)),
        priority=row.priority,
        expires_at=iso(row.expires_at),
        reason=row.reason,
        created_by=row.created_by,
        created_at=iso(row.created_at),
        idempotency_key=row.idempotency_key,
        reference=row.reference,
        expired_at=iso(row.expired_at) if row.expired_at else None,
    )


# Batches in a row that found their candidates expired by someone else before reading again stops.
REREADS = 3


class GrantService:
    def __init__(self, engine: AsyncEngine, *, reads: AsyncEngine | None = None) -> None:
        self.engine = engine
        # The admin surface's lists and histories (LEDGER_READ_DATABASE_URL: a standby); the
        # primary's engine when none is configured. Nothing that writes uses it.
        self.reads = reads or engine

    async def grant(self, account_id: str, body: GrantRequest, actor: Actor) -> tuple[Grant, bool]:
        """Give the account credit; (grant, created). The same key and body answer the same grant."""
        amount = parse_money(body.amount, param="amount")
        if amount <= 0:
            raise ValidationFailed("a grant amount must be greater than zero", param="amount")
        if not body.reason.strip():
            raise ValidationFailed("reason must not be blank", param="reason")
        digest = idempotency.request_hash("grant", body)

        async def work(conn: AsyncConnection) -> tuple[Grant, bool]:
            account = await require_locked(conn, account_id)
            previous = await repository.find_by_key(conn, account_id, body.idempotency_key)
            if previous is not None:
                if previous.request_hash != digest:
                    raise IdempotencyConflict(
                        f"idempotency_key {body.idempotency_key!r} was already used with a different request",
                        param="idempotency_key",
                    )
                return grant_view(previous), False
            # The database clock decides, as for every expiry (the job compares with now()).
            now: datetime = (await conn.exec_driver_sql("SELECT now()")).scalar_one()
            if body.expires_at <= now:
                raise ValidationFailed("expires_at must be in the future", param="expires_at")
            check_resulting_balance(account.balance, amount)
            currency = account.currency.strip()
            await journal.ensure_system_accounts(conn, currency)
            grant_id = uuid7()
            row = await repository.insert(
                conn,
                id=grant_id,
                account_id=account_id,
                currency=currency,
                amount=amount,
                priority=body.priority,
                expires_at=body.expires_at,
                key=body.idempotency_key,
                request_hash=digest,
                reason=body.reason,
                reference=body.reference,
                created_by=actor.identity,
            )
            posted = await journal.post(
                conn,
                kind="grant",
                account_id=account_id,
                currency=currency,
                legs=[
                    Leg(grants_account(currency), amount.copy_negate()),
                    Leg(account_id, amount, grant_book(grant_id)),
                ],
                actor=actor.identity,
                reference=body.reference,
                reason=body.reason,
            )
            await audit.record(
                conn,
                actor=actor.identity,
                role=actor.role,
                action="grant.create",
                target=account_id,
                reason=body.reason,
                details={
                    "grant_id": str(grant_id),
                    "amount": format_amount(amount),
                    "currency": currency,
                    "priority": body.priority,
                    "expires_at": iso(body.expires_at),
                    "transaction_id": posted.transaction_id,
                    "idempotency_key": body.idempotency_key,
                    "reference": body.reference,
                },
                request_id=actor.request_id,
            )
            fresh = await repository.get(conn, grant_id)
            return grant_view(fresh if fresh is not None else row, now), True

        result = await transaction(self.engine, work)
        if result[1]:
            MONEY_MOVEMENTS.labels("grant").inc()
        return result

    async def list(self, account_id: str, *, cursor: str | None, limit: int, live: bool = False) -> Page:
        """The account's grants by id (oldest first); `live` only those with money left, not expired."""
        after = parse_uuid(cursor) if cursor is not None else None
        if cursor is not None and after is None:
            raise ValidationFailed("cursor is not one this service issued", param="cursor")
        async with read_only(self.reads) as conn:
            if await accounts.get(conn, account_id) is None:
                raise AccountNotFound(f"account {account_id!r} does not exist")
            rows = await repository.list_page(conn, account_id, after=after, limit=limit + 1, live=live)
        more = len(rows) > limit
        rows = rows[:limit]
        now = datetime.now(UTC)
        return Page(
            data=[grant_view(r, now) for r in rows], next_cursor=str(rows[-1].id) if more and rows else None
        )

    async def expire_once(self, actor: Actor, *, batch: int = EXPIRY_BATCH) -> dict[str, Any]:
        """Post out every expired grant's remainder; a summary with counts and amounts per currency.

        Repeats batches until nothing is expired or a batch made no progress because what
        is left is locked by someone else (`skipped`, for the next pass). A batch whose
        candidates were all expired by a concurrent pass meanwhile reads candidates again."""
        expired = 0
        amounts: dict[str, Decimal] = {}
        skipped = 0
        rereads = 0
        while True:
            async with read_only(self.engine) as conn:
                candidates = await repository.expired_candidates(conn, batch)
            if not candidates:
                skipped = 0
                break

            async def work(
                conn: AsyncConnection, candidates: list[Any] = candidates
            ) -> tuple[list[tuple[str, Decimal]], bool]:
                done: list[tuple[str, Decimal]] = []
                rows, all_locked = await repository.lock_expired(conn, candidates)
                for row in rows:
                    currency = row.currency.strip()
                    posted = await journal.post(
                        conn,
                        kind="grant_expiry",
                        account_id=row.account_id,
                        currency=currency,
                        legs=[
                            Leg(row.account_id, row.remaining.copy_negate(), grant_book(row.id)),
                            Leg(grants_account(currency), row.remaining),
                        ],
                        actor=actor.identity,
                        reference=str(row.id),
                        reason=f"grant {row.id} expired at {iso(row.expires_at)}",
                    )
                    await audit.record(
                        conn,
                        actor=actor.identity,
                        role=actor.role,
                        action="grant.expire",
                        target=row.account_id,
                        reason="expired",
                        details={
                            "grant_id": str(row.id),
                            "amount": format_amount(row.remaining),
                            "currency": currency,
                            "expires_at": iso(row.expires_at),
                            "transaction_id": posted.transaction_id,
                        },
                        request_id=actor.request_id,
                    )
                    done.append((currency, row.remaining))
                return done, all_locked

            done, all_locked = await transaction(self.engine, work)
            for currency, amount in done:
                amounts[currency] = EXACT.add(amounts.get(currency, Decimal(0)), amount)
            expired += len(done)
            MONEY_MOVEMENTS.labels("grant_expiry").inc(len(done))
            if not done:
                rereads += 1
                if all_locked and rereads <= REREADS:
                    continue  # all expired by a concurrent pass meanwhile: read candidates again
                skipped = len(candidates)
                break
            rereads = 0
        summary = {
            "expired": expired,
            "skipped": skipped,
            "amounts": {c: format_amount(a) for c, a in sorted(amounts.items())},
        }
        if expired:
            log.info("grants.expired", **summary)
        return summary
