"""The integrity queries: full scans, run in one REPEATABLE READ snapshot."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

ACCOUNT_MISMATCHES = text(
    """
    SELECT a.id, a.balance, a.held,
           coalesce(e.balance, 0) AS journal_balance, coalesce(e.held, 0) AS journal_held
      FROM accounts a
      LEFT JOIN (SELECT account_id, sum(amount) AS balance,
                        coalesce(sum(amount) FILTER (WHERE book = 'hold'), 0) AS held
                   FROM journal_entries GROUP BY account_id) e ON e.account_id = a.id
     WHERE a.kind = 'customer'
       AND (a.balance <> coalesce(e.balance, 0) OR a.held <> coalesce(e.held, 0))
     ORDER BY a.id LIMIT 1000
    """
)
TOTALS = text("SELECT currency, sum(amount) AS total, count(*) AS n FROM journal_entries GROUP BY currency")
UNBALANCED = text(
    "SELECT transaction_id, currency, sum(amount) AS total FROM journal_entries "
    "GROUP BY transaction_id, currency HAVING sum(amount) <> 0 ORDER BY transaction_id LIMIT 1000"
)
COUNTS = text(
    "SELECT (SELECT count(*) FROM accounts WHERE kind = 'customer') AS accounts, "
    "(SELECT count(*) FROM journal_transactions) AS transactions"
)
SYSTEM_BALANCES = text(
    "SELECT a.id, coalesce(sum(e.amount), 0) AS balance FROM accounts a "
    "LEFT JOIN journal_entries e ON e.account_id = a.id WHERE a.kind = 'system' GROUP BY a.id ORDER BY a.id"
)
HOLD_MISMATCHES = text(
    """
    SELECT a.id, a.held, coalesce(h.open_amount, 0) AS holds_open
      FROM accounts a
      LEFT JOIN (SELECT account_id, sum(amount) AS open_amount FROM holds
                  WHERE state IN ('open', 'interrupted') GROUP BY account_id) h ON h.account_id = a.id
     WHERE a.kind = 'customer' AND a.held <> coalesce(h.open_amount, 0)
     ORDER BY a.id LIMIT 1000
    """
)
# Each grant's cached remaining and expired against its book's entries: remaining is the
# book's sum, expired what its grant_expiry entries took out.
GRANT_MISMATCHES = text(
    """
    SELECT g.id, g.account_id, g.remaining, g.expired,
           coalesce(e.book_sum, 0) AS journal_remaining, coalesce(e.expired_sum, 0) AS journal_expired
      FROM grants g
      LEFT JOIN (SELECT je.account_id, je.book, sum(je.amount) AS book_sum,
                        coalesce(-sum(je.amount) FILTER (WHERE t.kind = 'grant_expiry'), 0) AS expired_sum
                   FROM journal_entries je JOIN journal_transactions t ON t.id = je.transaction_id
                  WHERE starts_with(je.book, 'grant:') GROUP BY je.account_id, je.book) e
        ON e.account_id = g.account_id AND e.book = 'grant:' || g.id
     WHERE g.remaining <> coalesce(e.book_sum, 0) OR g.expired <> coalesce(e.expired_sum, 0)
     ORDER BY g.id LIMIT 1000
    """
)
HAS_GRANTS = text("SELECT to_regclass('grants') IS NOT NULL AS present")
HAS_HOLDS = text("SELECT to_regclass('holds') IS NOT NULL AS present")


async def begin_snapshot(conn: AsyncConnection) -> None:
    """Must be the first statement of the transaction: every query below sees one snapshot."""
    await conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")


async def snapshot(conn: AsyncConnection) -> dict[str, Any]:
    result: dict[str, Any] = {
        "mismatches": list((await conn.execute(ACCOUNT_MISMATCHES)).all()),
        "totals": list((await conn.execute(TOTALS)).all()),
        "unbalanced": list((await conn.execute(UNBALANCED)).all()),
        "counts": (await conn.execute(COUNTS)).one(),
        "system": list((await conn.execute(SYSTEM_BALANCES)).all()),
        "hold_mismatches": [],
        "grant_mismatches": [],
    }
    if (await conn.execute(HAS_GRANTS)).scalar():
        result["grant_mismatches"] = list((await conn.execute(GRANT_MISMATCHES)).all())
    if (await conn.execute(HAS_HOLDS)).scalar():
        result["hold_mismatches"] = list((await conn.execute(HOLD_MISMATCHES)).all())
    return result
