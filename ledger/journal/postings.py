"""Legs of a journal transaction and the system accounts they use.

A leg is (account, book, amount). Customer accounts have the books `main` and
`hold`, and one book `grant:<grant id>` per credit grant. An account's `balance` is
the sum of all its books, its `held` is the hold book and its `granted` the sum of
its grant books (`paid` = balance - granted), so moving money main -> hold (a
reservation) leaves `balance` unchanged and lowers `available` = balance +
credit_limit - held.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from decimal import Decimal

from pricing.money import add

# "main", "hold" or grant_book(grant id) (the CHECK on journal_entries.book).
Book = str
REVENUE_SHARDS = 16


@dataclass(frozen=True)
class Leg:
    account_id: str
    amount: Decimal
    book: Book = "main"


def funding_account(currency: str) -> str:
    return f"system:funding:{currency}"


def adjustments_account(currency: str) -> str:
    return f"system:adjustments:{currency}"


def grants_account(currency: str) -> str:
    """The counterpart of every grant and grant expiry (like funding: no cached balance)."""
    return f"system:grants:{currency}"


def grant_book(grant_id: object) -> str:
    return f"grant:{grant_id}"


def revenue_account(currency: str, spread_key: str) -> str:
    """One of the revenue shards, chosen by a stable hash of `spread_key` (e.g. the hold id)."""
    shard = zlib.crc32(spread_key.encode()) % REVENUE_SHARDS
    return f"system:revenue:{currency}:{shard:02d}"


def revenue_accounts(currency: str) -> list[str]:
    """Every revenue shard of the currency: revenue is the sum of their entries."""
    return [f"system:revenue:{currency}:{n:02d}" for n in range(REVENUE_SHARDS)]


def system_accounts(currency: str) -> list[str]:
    return [
        funding_account(currency),
        adjustments_account(currency),
        grants_account(currency),
        *revenue_accounts(currency),
    ]


def balanced(legs: list[Leg]) -> bool:
    # Exact sum: sum() in the default 28-digit context would round 38-digit amounts.
    return add(*(leg.amount for leg in legs)) == 0
