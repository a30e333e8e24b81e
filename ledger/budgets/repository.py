"""Every SQL statement of the budgets domain.

A budget row (table `budgets`, migration 0012) is per (account_id, budget_key). It keeps
`held` (the key's unresolved holds), `spent` (lifetime charges) and the charges of three
UTC calendar windows (day; ISO week from Monday; month), each with the first day of the
window it counts. A stored window that is not the current one counts as 0: every read
goes through `ledger_budget_period_spent`, every write rolls the window forward.

The rules are SQL functions (migrations/sql/ledger_budget_*.sql), written once and
called both by the batch function `ledger_hold_batch` and by the statements here:
`ledger_budget_hold` (a reserve's check and hold), `ledger_budget_move` (settle, release,
true-up), and the period helpers the views read.

Lock order, as everywhere: the account row first, then the budget row (FOR UPDATE).
Every write to a budget row happens while its account row is locked, so the account
lock alone serializes a key's budget.

Periods: `daily` counts the day window, `weekly` the week, `monthly` the month, `none`
the lifetime `spent`. A settle counts in the windows of the moment it settles; a true-up
(a late settle after the reconciler or an admin resolved the hold) corrects the spend of
the moment the hold was resolved: in the current windows when that moment is in them,
else only in the lifetime `spent` (so a window's spend is exactly the final charges of
the key's holds resolved in it, and never negative).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_MOVE = text(
    "SELECT * FROM ledger_budget_move(:account_id, :budget_key, CAST(:held_delta AS numeric), "
    "CAST(:spent_delta AS numeric), coalesce(CAST(:spent_at AS timestamptz), now()))"
)


async def move(
    conn: AsyncConnection,
    *,
    account_id: str,
    budget_key: str,
    held_delta: Decimal,
    spent_delta: Decimal,
    spent_at: datetime | None = None,
) -> Any | None:
    """Apply one movement to a key's budget row (the caller holds the account lock).

    `spent_at` (default: now) is the moment the spend belongs to. The row returned says
    whether the alert threshold was just reached (`alerted`); None when the key has no row."""
    params = {
        "account_id": account_id,
        "budget_key": budget_key,
        "held_delta": held_delta,
        "spent_delta": spent_delta,
        "spent_at": spent_at,
    }
    return (await conn.execute(_MOVE, params)).first()


# --- the admin surface ---------------------------------------------------------------------

_VIEW_COLUMNS = (
    "b.account_id, b.budget_key, b.amount, b.period, b.alert_threshold, b.held, b.spent, b.alerted_at, "
    "b.created_at, b.updated_at, a.currency, ledger_budget_period_spent(b) AS period_spent, "
    "ledger_budget_period_start(b.period) AS period_start, ledger_budget_period_end(b.period) AS period_end, "
    "ledger_budget_alerted_in_period(b) AS alerted_in_period"
)
_GET = text(
    f"SELECT {_VIEW_COLUMNS} FROM budgets b JOIN accounts a ON a.id = b.account_id "
    "WHERE b.account_id = :account_id AND b.budget_key = :budget_key"
)
_LIST = text(
    f"SELECT {_VIEW_COLUMNS} FROM budgets b JOIN accounts a ON a.id = b.account_id "
    "WHERE b.account_id = :account_id AND b.budget_key > :after ORDER BY b.budget_key LIMIT :limit"
)
_LOCK = text(
    "SELECT amount, period, alert_threshold FROM budgets "
    "WHERE account_id = :account_id AND budget_key = :budget_key FOR UPDATE"
)
# Any change of the terms clears `alerted_at`: the next settle at or over the (new)
# threshold alerts again.
_SET = text(
    """
    INSERT INTO budgets (account_id, budget_key, amount, period, alert_threshold, day_start, week_start,
                         month_start)
    VALUES (:account_id, :budget_key, :amount, :period, :alert_threshold, ledger_budget_window('day', now()),
            ledger_budget_window('week', now()), ledger_budget_window('month', now()))
    ON CONFLICT (account_id, budget_key) DO UPDATE
      SET amount = EXCLUDED.amount, period = EXCLUDED.period, alert_threshold = EXCLUDED.alert_threshold,
          alerted_at = NULL, updated_at = now()
    """
)


async def get(conn: AsyncConnection, account_id: str, budget_key: str) -> Any | None:
    return (await conn.execute(_GET, {"account_id": account_id, "budget_key": budget_key})).first()


async def list_page(conn: AsyncConnection, account_id: str, *, after: str, limit: int) -> list[Any]:
    params = {"account_id": account_id, "after": after, "limit": limit}
    return list((await conn.execute(_LIST, params)).all())


async def lock(conn: AsyncConnection, account_id: str, budget_key: str) -> Any | None:
    """The key's budget terms, its row locked (the caller locked the account row first)."""
    return (await conn.execute(_LOCK, {"account_id": account_id, "budget_key": budget_key})).first()


async def set_terms(
    conn: AsyncConnection,
    account_id: str,
    budget_key: str,
    *,
    amount: Decimal | None,
    period: str | None,
    alert_threshold: Decimal | None,
) -> None:
    params = {
        "account_id": account_id,
        "budget_key": budget_key,
        "amount": amount,
        "period": period,
        "alert_threshold": alert_threshold,
    }
    await conn.execute(_SET, params)
