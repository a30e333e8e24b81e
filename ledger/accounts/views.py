"""How an account, its balance and its journal read on the wire (rows to response Structs).

Every amount is written by `pricing.money.format_amount` (a plain decimal string, never
a float), and every derived figure is computed exactly in the EXACT context:
- `paid` = balance - grant books (the main and hold books: money deposited or owed);
- `granted` = grant books - lapsed (what live grants still hold);
- `available` = balance - lapsed + credit limit - held (`ledger.money.available_of`).
The console renders the same rows with the same functions, so its figures are the API's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.accounts.schemas import Account, Balance, JournalTransaction, Leg
from ledger.journal.repository import PastBalance
from ledger.money import available_of
from ledger.schemas import iso
from pricing.money import EXACT, format_amount


def account_view(row: Any) -> Account:
    available = available_of(row.balance, row.credit_limit, row.held, row.lapsed)
    return Account(
        account_id=row.id,
        currency=row.currency.strip(),
        credit_limit=format_amount(row.credit_limit),
        balance=format_amount(row.balance),
        paid=format_amount(EXACT.subtract(row.balance, row.grant_books)),
        granted=format_amount(EXACT.subtract(row.grant_books, row.lapsed)),
        held=format_amount(row.held),
        available=format_amount(available),
        metadata=row.metadata,
        created_at=iso(row.created_at),
        frozen=row.frozen_at is not None,
        frozen_at=iso(row.frozen_at) if row.frozen_at else None,
        frozen_reason=row.frozen_reason,
        review=row.review,
        plan=None if row.plan_id is None else {"id": row.plan_id, "revision": row.plan_revision},
    )


def balance_view(row: Any) -> Balance:
    account = account_view(row)
    return Balance(
        account_id=account.account_id,
        currency=account.currency,
        balance=account.balance,
        paid=account.paid,
        granted=account.granted,
        held=account.held,
        available=account.available,
        credit_limit=account.credit_limit,
    )


def past_balance_view(row: Any, past: PastBalance, as_of: datetime) -> Balance:
    """The books at `as_of` (from the journal), against today's credit limit."""
    return Balance(
        account_id=row.id,
        currency=row.currency.strip(),
        balance=format_amount(past.balance),
        paid=format_amount(EXACT.subtract(past.balance, past.grant_books)),
        granted=format_amount(EXACT.subtract(past.grant_books, past.lapsed)),
        held=format_amount(past.held),
        available=format_amount(available_of(past.balance, row.credit_limit, past.held, past.lapsed)),
        credit_limit=format_amount(row.credit_limit),
        as_of=iso(as_of),
    )


def journal_view(account_id: str, row: Any, legs: list[Any]) -> JournalTransaction:
    """One journal transaction as the account sees it, with all of its entries."""
    return JournalTransaction(
        transaction_id=str(row.id),
        kind=row.kind,
        account_id=account_id,
        amount=format_amount(row.amount),
        held_change=format_amount(row.held_change),
        balance_after=format_amount(row.balance_after),
        held_after=format_amount(row.held_after),
        actor=row.actor,
        created_at=iso(row.created_at),
        reference=row.reference,
        reason=row.reason,
        hold_id=str(row.hold_id) if row.hold_id else None,
        entries=[
            Leg(account_id=leg.account_id, book=leg.book, amount=format_amount(leg.amount)) for leg in legs
        ],
    )
