"""Request and response Structs of the budgets domain."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ledger.schemas import Fraction, PositiveAmount, Reason

# Like an idempotency key: 1..128 characters (U+0000 is refused for every body string by
# admission), but no "/": the key must be addressable as one segment of the admin path
# (the router decodes %2F before matching).
BudgetKey = Annotated[str, Meta(min_length=1, max_length=128, pattern="^[^/]+$")]
Period = Literal["daily", "weekly", "monthly", "none"]


class SetBudget(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """PUT: set the key's budget, or remove it with `amount: null`.

    `period` is required with an amount; `alert_threshold` is an optional fraction of the
    amount in (0, 1] (e.g. "0.8": alert once the period's spend reaches 80 %)."""

    amount: PositiveAmount | None
    reason: Reason
    period: Period | None = None
    alert_threshold: Fraction | None = None


class Budget(msgspec.Struct, frozen=True):
    """A budget key of an account: its budget (if set) and what its current period has used.

    `amount` null: no budget (unlimited); spend is still tracked. `spent` is the current
    period's (lifetime for period none, or when no budget is set), `held` the key's
    unresolved holds, `remaining` amount - spent - held (never below 0). `period_start` /
    `period_end` bound the current UTC period [start, end) (null for none). `alert_crossed`: the current
    period's spend is at or above alert_threshold x amount; `alerted_at` is when a settle
    first took it there in this period (null if not)."""

    account_id: str
    budget_key: str
    currency: str
    amount: str | None
    period: Period | None
    alert_threshold: str | None
    period_start: str | None
    period_end: str | None
    spent: str
    held: str
    remaining: str | None
    alert_crossed: bool
    alerted_at: str | None
    lifetime_spent: str
    created_at: str
    updated_at: str
