"""Response Structs of the reports domain. Amounts are plain decimal strings."""

from __future__ import annotations

import msgspec


class Position(msgspec.Struct, frozen=True):
    balance: str
    held: str


class KindTotal(msgspec.Struct, frozen=True):
    count: int
    amount: str  # net change of `balance`
    held_change: str


class StatementEntry(msgspec.Struct, frozen=True):
    """One journal transaction touching the account; balances are the running ones."""

    time: str
    transaction_id: str
    kind: str
    amount: str
    held_change: str
    balance_after: str
    held_after: str
    hold_id: str | None = None
    reference: str | None = None
    reason: str | None = None

    def notes(self) -> tuple[str | None, str | None, str | None]:
        return self.hold_id, self.reference, self.reason


class Statement(msgspec.Struct, frozen=True, rename={"start": "from", "end": "to"}):
    """opening.balance + sum(entries.amount) == closing.balance (and likewise for held)."""

    account_id: str
    currency: str
    start: str | None
    end: str
    opening: Position
    closing: Position
    totals: dict[str, KindTotal]
    entries: list[StatementEntry]


class RevenueGroup(msgspec.Struct, frozen=True):
    key: str
    amount: str
    settles: int
    true_ups: int


class RevenueReport(msgspec.Struct, frozen=True, rename={"start": "from", "end": "to"}):
    """sum(groups.amount) == total: the revenue shards' settle and true-up credits in the period."""

    currency: str
    group_by: str
    start: str | None
    end: str
    total: str
    groups: list[RevenueGroup]
