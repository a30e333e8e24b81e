"""Legs of a journal transaction and the system accounts they use.

A leg is (account, book, amount). Customer accounts have two books: `main` and
`hold`. An account's `balance` is the sum of both books and its `held` is the hold
book, so moving money main -> hold (a reservation) leaves `balance` unchanged and
lowers `available` = balance + credit_limit - held.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pricing.money import add

Book = Literal["main", "hold"]
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


def revenue_account(currency: str, spread_key: str) -> str:
    """One of the revenue shards, chosen by a stable hash of `spread_key` (e.g. the hold id)."""
    shard = zlib.crc32(spread_key.encode()) % REVENUE_SHARDS
    return f"system:revenue:{currency}:{shard:02d}"


def revenue_accounts(currency: str) -> list[str]:
    """Every revenue shard of the currency: revenue is the sum of their entries."""
    return [f"system:revenue:{currency}:{n:02d}" for n in range(REVENUE_SHARDS)]


def system_accounts(currency: str) -> list[str]:
    return [funding_account(currency), adjustments_account(currency), *revenue_accounts(currency)]


def balanced(legs: list[Leg]) -> bool:
    # Exact sum: sum() in the default 28-digit context would round 38-digit amounts.
    return add(*(leg.amount for leg in legs)) == 0
