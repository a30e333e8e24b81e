"""Every SQL statement of the reports domain (read only).

Time: an entry's `created_at` is its database transaction's start time (`now()`), the
same for every entry of one journal transaction. Periods are [start, end). Entries
are ordered by (time, transaction id); a statement's running balances are computed
here from its opening balance, so opening + sum(amounts) = closing holds by
construction and is what the tests check against the cached balance.

Statements are read in one REPEATABLE READ snapshot (the caller's connection), so the
opening, the entries, the totals and the closing agree even while money moves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.journal.postings import revenue_accounts

GroupBy = Literal["model", "account", "day", "plan"]
STREAM_BATCH = 500

_ACCOUNT = text("SELECT id, currency, created_at FROM accounts WHERE id = :id AND kind = 'customer'")
_NOW = text("SELECT now() AS now")

_POSITIONS = text(
    """
    SELECT coalesce(sum(amount) FILTER (WHERE created_at < :start), 0) AS opening_balance,
           coalesce(sum(amount) FILTER (WHERE created_at < :start AND book = 'hold'), 0) AS opening_held,
           coalesce(sum(amount), 0) AS closing_balance,
           coalesce(sum(amount) FILTER (WHERE book = 'hold'), 0) AS closing_held
      FROM journal_entries WHERE account_id = :account_id AND created_at < :end
    """
)

_TOTALS = text(
    """
    SELECT t.kind, count(DISTINCT t.id) AS count, sum(e.amount) AS amount,
           coalesce(sum(e.amount) FILTER (WHERE e.book = 'hold'), 0) AS held_change
      FROM journal_entries e JOIN journal_transactions t ON t.id = e.transaction_id
     WHERE e.account_id = :account_id AND e.created_at >= :start AND e.created_at < :end
     GROUP BY t.kind ORDER BY t.kind
    """
)

_ENTRIES = text(
    """
    WITH period AS (
      SELECT t.id, t.created_at, t.kind, t.hold_id, t.reference, t.reason,
             sum(e.amount) AS amount,
             coalesce(sum(e.amount) FILTER (WHERE e.book = 'hold'), 0) AS held_change
        FROM journal_entries e JOIN journal_transactions t ON t.id = e.transaction_id
       WHERE e.account_id = :account_id AND e.created_at >= :start AND e.created_at < :end
       GROUP BY t.id
    )
    SELECT period.*,
           CAST(:opening_balance AS numeric) + sum(amount) OVER running AS balance_after,
           CAST(:opening_held AS numeric) + sum(held_change) OVER running AS held_after
      FROM period
    WINDOW running AS (ORDER BY created_at, id ROWS UNBOUNDED PRECEDING)
     ORDER BY created_at, id
    """
)


async def account(conn: AsyncConnection, account_id: str) -> Any | None:
    return (await conn.execute(_ACCOUNT, {"id": account_id})).first()


async def now(conn: AsyncConnection) -> datetime:
    value: datetime = (await conn.execute(_NOW)).scalar_one()
    return value


async def positions(conn: AsyncConnection, account_id: str, start: datetime, end: datetime) -> Any:
    return (await conn.execute(_POSITIONS, {"account_id": account_id, "start": start, "end": end})).one()


async def totals(conn: AsyncConnection, account_id: str, start: datetime, end: datetime) -> list[Any]:
    params = {"account_id": account_id, "start": start, "end": end}
    return list((await conn.execute(_TOTALS, params)).all())


async def entries(conn: AsyncConnection, **params: Any) -> list[Any]:
    return list((await conn.execute(_ENTRIES, params)).all())


async def stream_entries(conn: AsyncConnection, **params: Any) -> AsyncIterator[list[Any]]:
    """The same rows through a server-side cursor, STREAM_BATCH at a time (never all in memory)."""
    result = await conn.stream(_ENTRIES.execution_options(yield_per=STREAM_BATCH), params)
    async for batch in result.partitions(STREAM_BATCH):
        yield list(batch)


_GROUP_KEYS: dict[str, str] = {
    "model": "h.model",
    "account": "t.account_id",
    "day": "to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    # the plan the hold pinned (0024); list-rate holds in a group of their own
    "plan": "coalesce(h.plan_id, '(list)')",
}
_REVENUE: dict[str, Any] = {
    group_by: text(
        f"""
        SELECT {key} AS key, sum(e.amount) AS amount,
               count(*) FILTER (WHERE t.kind = 'settle') AS settles,
               count(*) FILTER (WHERE t.kind = 'true_up') AS true_ups
          FROM journal_entries e
          JOIN journal_transactions t ON t.id = e.transaction_id
          LEFT JOIN holds h ON h.id = t.hold_id
         WHERE e.account_id = ANY(CAST(:shards AS text[])) AND e.currency = :currency
           AND t.kind IN ('settle', 'true_up')
           AND e.created_at >= :start AND e.created_at < :end
         GROUP BY 1 ORDER BY 1
        """
    )
    for group_by, key in _GROUP_KEYS.items()
}


async def revenue(
    conn: AsyncConnection, *, currency: str, group_by: GroupBy, start: datetime, end: datetime
) -> list[Any]:
    params = {"shards": revenue_accounts(currency), "currency": currency, "start": start, "end": end}
    return list((await conn.execute(_REVENUE[group_by], params)).all())
