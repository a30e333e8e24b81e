"""Every SQL statement of the budgets domain, and the SQL pieces the hold statements embed.

A budget row (table `budgets`, migration 0012) is per (account_id, budget_key). It keeps
`held` (the key's unresolved holds), `spent` (lifetime charges) and the charges of three
UTC calendar windows (day; ISO week from Monday; month), each with the first day of the
window it counts. A stored window that is not the current one counts as 0: every read
goes through `current_spent`, every write rolls the window forward.

Lock order, as everywhere: the account row first, then the budget row (FOR UPDATE). The
pieces below lock the budget row through a join with the CTE that locked the account,
so the account lock is always taken first. Every write to a budget row happens while its
account row is locked, so the account lock alone serializes a key's budget.

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

WINDOWS = ("day", "week", "month")
_PERIOD_WINDOW = {"daily": "day", "weekly": "week", "monthly": "month"}
_WINDOW_LENGTH = {"day": "interval '1 day'", "week": "interval '7 days'", "month": "interval '1 month'"}


def window(kind: str, at: str) -> str:
    """The first day (UTC) of the `kind` window that contains the timestamptz `at`."""
    if kind == "day":
        return f"CAST(timezone('UTC', {at}) AS date)"
    return f"CAST(date_trunc('{kind}', timezone('UTC', {at})) AS date)"


def current_spent(b: str, kind: str) -> str:
    """The charges of row `b` in the current `kind` window (0 when the stored one is older)."""
    return f"(CASE WHEN {b}.{kind}_start = {window(kind, 'now()')} THEN {b}.{kind}_spent ELSE 0 END)"


def _by_period(b: str, per_window: dict[str, str], other: str) -> str:
    arms = " ".join(f"WHEN '{period}' THEN {per_window[kind]}" for period, kind in _PERIOD_WINDOW.items())
    return f"(CASE {b}.period {arms} ELSE {other} END)"


def period_spent(b: str) -> str:
    """What row `b`'s budget period has spent so far (lifetime `spent` for period none)."""
    return _by_period(b, {k: current_spent(b, k) for k in WINDOWS}, f"{b}.spent")


def period_start(b: str) -> str:
    """The first day of the current period (NULL for period none or no budget)."""
    return _by_period(b, {k: window(k, "now()") for k in WINDOWS}, "NULL")


def period_end(b: str) -> str:
    """The day after the current period's last (NULL for period none or no budget)."""
    ends = {k: f"CAST({window(k, 'now()')} + {_WINDOW_LENGTH[k]} AS date)" for k in WINDOWS}
    return _by_period(b, ends, "NULL")


def alerted_in_period(b: str) -> str:
    """True when the alert threshold was reached (and recorded) in the current period."""
    return (
        f"({b}.alerted_at IS NOT NULL AND ({b}.period = 'none' "
        f"OR timezone('UTC', {b}.alerted_at) >= {period_start(b)}))"
    )


# --- pieces of the reserve statement (ledger.holds.repository) ----------------------------

# After CTE `a` (the locked account): lock the key's budget row and read its numbers.
RESERVE_LOCK = f"""
    , bk AS (
      SELECT b.amount AS budget_amount, b.held AS budget_held, {period_spent("b")} AS budget_spent,
             {period_start("b")} AS budget_period_start, {period_end("b")} AS budget_period_end,
             (b.amount IS NOT NULL AND {period_spent("b")} + b.held + :amount > b.amount) AS budget_exceeded
        FROM budgets b JOIN a ON b.account_id = a.id
       WHERE b.budget_key = :budget_key
       FOR UPDATE OF b
    )"""
# A condition of CTE `go`: the key's period spend + its holds + this one stay within the budget
# (no budget row, or no amount set: unlimited).
RESERVE_CONDITION = """
         AND NOT EXISTS (SELECT 1 FROM bk WHERE bk.budget_exceeded)"""
# After CTE `h` (the new hold): its amount joins the key's held (the row is made on first use).
RESERVE_WRITE = f"""
    , bu AS (
      INSERT INTO budgets (account_id, budget_key, held, day_start, week_start, month_start)
      SELECT h.account_id, h.budget_key, h.amount, {window("day", "now()")}, {window("week", "now()")},
             {window("month", "now()")}
        FROM h
      ON CONFLICT (account_id, budget_key)
        DO UPDATE SET held = budgets.held + EXCLUDED.held, updated_at = now()
      RETURNING 1
    )"""
RESERVE_COLUMNS = (
    "bk.budget_amount, bk.budget_held, bk.budget_spent, bk.budget_period_start, bk.budget_period_end, "
    "bk.budget_exceeded, "
)
RESERVE_JOIN = " LEFT JOIN bk ON true"


# --- a budget movement: settle, release, true-up ----------------------------------------


def movement_ctes(source: str) -> str:
    """CTEs `bo`, `bm` applying each row of CTE `source` to its budget row.

    `source` has columns account_id, budget_key, held_delta, spent_delta, spent_at; its
    rows must come from (or after) a statement that locked the account. `bo` locks the
    budget row (FOR UPDATE: the latest committed version) and keeps its `alerted_at`;
    `bm` applies the deltas, rolls the windows, and records the alert when this movement
    takes the period's spend to the threshold for the first time in the period. `bm`
    returns `alerted` true exactly then (so a warning is logged once per period).
    """
    sets = ["held = b.held + s.held_delta", "spent = b.spent + s.spent_delta", "updated_at = now()"]
    new_spent: dict[str, str] = {}
    for kind in WINDOWS:
        now_window = window(kind, "now()")
        new_spent[kind] = (
            f"({current_spent('b', kind)} + "
            f"CASE WHEN {window(kind, 's.spent_at')} = {now_window} THEN s.spent_delta ELSE 0 END)"
        )
        sets += [f"{kind}_start = {now_window}", f"{kind}_spent = {new_spent[kind]}"]
    crossing = (
        f"(s.spent_delta > 0 AND b.alert_threshold IS NOT NULL AND NOT {alerted_in_period('b')} "
        f"AND {_by_period('b', new_spent, 'b.spent + s.spent_delta')} >= b.alert_threshold * b.amount)"
    )
    sets.append(f"alerted_at = CASE WHEN {crossing} THEN now() ELSE b.alerted_at END")
    return f"""
    , bo AS (
      SELECT b.account_id, b.budget_key, b.alerted_at
        FROM budgets b JOIN {source} s ON b.account_id = s.account_id AND b.budget_key = s.budget_key
       FOR UPDATE OF b
    ), bm AS (
      UPDATE budgets b SET {", ".join(sets)}
        FROM bo JOIN {source} s ON s.account_id = bo.account_id AND s.budget_key = bo.budget_key
       WHERE b.account_id = bo.account_id AND b.budget_key = bo.budget_key
      RETURNING b.account_id, b.budget_key, b.amount, b.period, b.alert_threshold,
                (b.alerted_at IS DISTINCT FROM bo.alerted_at) AS alerted, {period_spent("b")} AS period_spent
    )"""


# For the one-statement settle (ledger.holds.repository): source rows from CTE `u`, the
# settled hold (its account row was locked by CTE `l`).
SETTLE_SOURCE = """
    , bs AS (
      SELECT u.account_id, u.budget_key, -u.amount AS held_delta, u.charged AS spent_delta, now() AS spent_at
        FROM u WHERE u.budget_key IS NOT NULL
    )"""
SETTLE_CTES = SETTLE_SOURCE + movement_ctes("bs")
SETTLE_COLUMNS = (
    "bm.alerted AS budget_alerted, bm.amount AS budget_amount, bm.period AS budget_period, "
    "bm.alert_threshold AS budget_alert_threshold, bm.period_spent AS budget_period_spent, "
)
SETTLE_JOIN = " LEFT JOIN bm ON true"


def _move_statement(spent_at: str) -> Any:
    return text(
        f"""
        WITH bs AS (
          SELECT CAST(:account_id AS text) AS account_id, CAST(:budget_key AS text) AS budget_key,
                 CAST(:held_delta AS numeric) AS held_delta, CAST(:spent_delta AS numeric) AS spent_delta,
                 {spent_at} AS spent_at
        )"""
        + movement_ctes("bs")
        + " SELECT * FROM bm"
    )


_MOVE_NOW = _move_statement("now()")
_MOVE_AT = _move_statement("CAST(:spent_at AS timestamptz)")


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
    whether the alert threshold was just reached (`alerted`)."""
    params: dict[str, Any] = {
        "account_id": account_id,
        "budget_key": budget_key,
        "held_delta": held_delta,
        "spent_delta": spent_delta,
    }
    if spent_at is None:
        return (await conn.execute(_MOVE_NOW, params)).first()
    return (await conn.execute(_MOVE_AT, {**params, "spent_at": spent_at})).first()


# --- the admin surface ---------------------------------------------------------------------

_VIEW_COLUMNS = (
    f"b.account_id, b.budget_key, b.amount, b.period, b.alert_threshold, b.held, b.spent, b.alerted_at, "
    f"b.created_at, b.updated_at, a.currency, {period_spent('b')} AS period_spent, "
    f"{period_start('b')} AS period_start, {period_end('b')} AS period_end, "
    f"{alerted_in_period('b')} AS alerted_in_period"
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
    f"""
    INSERT INTO budgets (account_id, budget_key, amount, period, alert_threshold, day_start, week_start,
                         month_start)
    VALUES (:account_id, :budget_key, :amount, :period, :alert_threshold, {window("day", "now()")},
            {window("week", "now()")}, {window("month", "now()")})
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
