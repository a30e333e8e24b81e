"""Money movements of an account (deposits, adjustments): one balanced journal transaction each.

`post` runs inside the caller's database transaction, on an account row the caller has
locked (`ledger.accounts.service.require_locked`), so nothing else moves the balance
until commit. In that one transaction it checks the idempotency key, posts the
journal transaction (the account's leg and its system counterpart's, summing to zero),
remembers the key and writes the audit record: a refused or failed request changes
nothing. A key seen before with the same request answers the movement it posted
(`replay`), never a second one; with another request it is refused (409).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ledger import idempotency
from ledger.accounts import repository
from ledger.accounts.schemas import Movement
from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.journal import repository as journal
from ledger.journal.postings import Leg as PostingLeg
from ledger.money import check_resulting_balance
from ledger.schemas import iso
from pricing.money import format_amount

MONEY_SCOPE = "money"


async def post(
    conn: AsyncConnection,
    account_id: str,
    account: Any,
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
    """Post `amount` to `account_id` (its locked row: `account`) against `counterpart(currency)`;
    (movement, created)."""
    currency = account.currency.strip()
    previous = await idempotency.replayed_transaction(
        conn, account_id=account_id, scope=MONEY_SCOPE, key=key, digest=digest
    )
    if previous is not None:
        return await replay(conn, account_id, previous, key), False
    check_resulting_balance(account.balance, amount)
    posted = await journal.post(
        conn,
        kind=kind,
        account_id=account_id,
        currency=currency,
        # copy_negate is exact; unary minus rounds to the 28-digit default context
        legs=[
            PostingLeg(counterpart(currency), amount.copy_negate()),
            PostingLeg(account_id, amount),
        ],
        actor=actor.identity,
        reference=reference,
        reason=reason,
    )
    await idempotency.remember(
        conn,
        account_id=account_id,
        scope=MONEY_SCOPE,
        key=key,
        digest=digest,
        transaction_id=posted.transaction_id,
    )
    await audit.record(
        conn,
        actor=actor.identity,
        role=actor.role,
        action=f"account.{kind}",
        target=account_id,
        reason=reason,
        details={
            "amount": format_amount(amount),
            "currency": currency,
            "transaction_id": posted.transaction_id,
            "idempotency_key": key,
            "reference": reference,
        },
        request_id=actor.request_id,
    )
    assert posted.balance_after is not None
    return (
        Movement(
            transaction_id=str(posted.transaction_id),
            kind=kind,
            account_id=account_id,
            idempotency_key=key,
            amount=format_amount(amount),
            currency=currency,
            balance=format_amount(posted.balance_after),
            created_at=iso(posted.created_at),
            reference=reference,
            reason=reason,
        ),
        True,
    )


async def replay(conn: AsyncConnection, account_id: str, transaction_id: int, key: str) -> Movement:
    """The movement a key already posted, as it was answered then."""
    rows, _ = await journal.account_journal(conn, account_id, before=transaction_id + 1, limit=1)
    row = rows[0]
    assert row.id == transaction_id
    account = await repository.get(conn, account_id)
    assert account is not None
    return Movement(
        transaction_id=str(row.id),
        kind=row.kind,
        account_id=account_id,
        idempotency_key=key,
        amount=format_amount(row.amount),
        currency=account.currency.strip(),
        balance=format_amount(row.balance_after),
        created_at=iso(row.created_at),
        reference=row.reference,
        reason=row.reason,
    )
