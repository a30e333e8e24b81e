"""The console's own reads, where the services list in another order or filter less.

- account search: a case-insensitive substring match on the account id,
  cursor-paginated by id like `GET /admin/v1/accounts`; `%`, `_` and `\\` in the
  query are matched literally;
- an account's transactions of a set of kinds in a period, holds and grants: newest
  first, as every console list is;
- a hold's journal transactions (its timeline).
Read only; rows are rendered by the owning domain's view functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.accounts.repository import COLUMNS
from ledger.grants.repository import GRANT_COLUMNS
from ledger.holds.repository import HOLD_COLUMNS

# The same columns as the accounts API, so `ledger.accounts.views.account_view` renders a row.
_SEARCH = text(
    f"SELECT {COLUMNS} FROM accounts "
    "WHERE kind = 'customer' AND id > :after AND id ILIKE :pattern ESCAPE '\\' "
    "ORDER BY id LIMIT :limit"
)


def like_pattern(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def search(conn: AsyncConnection, *, query: str, after: str, limit: int) -> list[Any]:
    params = {"pattern": like_pattern(query), "after": after, "limit": limit}
    return list((await conn.execute(_SEARCH, params)).all())


# --- the console's lists: newest first, filtered as the pages need ---------------------

KINDS = ("deposit", "adjustment", "grant", "grant_expiry", "reserve", "settle", "release", "true_up")

# An account's journal transactions of the given kinds in [since, until), newest first
# (by transaction id, as `GET /admin/v1/accounts/{id}/transactions`), each with the
# account's balance and held after it as the entries recorded them.
_TRANSACTIONS = text(
    """
    WITH page AS (
      SELECT DISTINCT e.transaction_id FROM journal_entries e
        JOIN journal_transactions t ON t.id = e.transaction_id
       WHERE e.account_id = :account_id AND e.transaction_id < :before
         AND t.kind = ANY(CAST(:kinds AS text[]))
         AND e.created_at >= :since AND e.created_at < :until
       ORDER BY e.transaction_id DESC LIMIT :limit
    )
    SELECT t.id, t.kind, t.hold_id, t.reference, t.reason, t.actor, t.created_at,
           sum(e.amount) AS amount,
           coalesce(sum(e.amount) FILTER (WHERE e.book = 'hold'), 0) AS held_change,
           (array_agg(e.balance_after ORDER BY e.id DESC))[1] AS balance_after,
           (array_agg(e.held_after ORDER BY e.id DESC))[1] AS held_after
      FROM page
      JOIN journal_transactions t ON t.id = page.transaction_id
      JOIN journal_entries e ON e.transaction_id = t.id AND e.account_id = :account_id
     GROUP BY t.id
     ORDER BY t.id DESC
    """
)


async def transactions(
    conn: AsyncConnection,
    account_id: str,
    *,
    kinds: Sequence[str],
    since: datetime,
    until: datetime,
    before: int | None,
    limit: int,
) -> list[Any]:
    params = {
        "account_id": account_id,
        "kinds": list(kinds),
        "since": since,
        "until": until,
        "before": before if before is not None else 2**63 - 1,
        "limit": limit,
    }
    return list((await conn.execute(_TRANSACTIONS, params)).all())


_HOLDS = text(
    f"""
    SELECT {HOLD_COLUMNS} FROM holds
     WHERE (CAST(:state AS text) IS NULL OR state = ANY(string_to_array(:state, ',')))
       AND (CAST(:account_id AS text) IS NULL OR account_id = :account_id)
       AND id < :before
     ORDER BY id DESC LIMIT :limit
    """
)


async def holds(
    conn: AsyncConnection, *, states: Sequence[str], account_id: str | None, before: UUID | None, limit: int
) -> list[Any]:
    """Holds newest first (UUIDv7 ids grow with time), of any of `states` (none: every state)."""
    params = {
        "state": ",".join(states) or None,
        "account_id": account_id,
        "before": before or UUID(int=2**128 - 1),
        "limit": limit,
    }
    return list((await conn.execute(_HOLDS, params)).all())


_GRANTS = text(
    f"SELECT {GRANT_COLUMNS} FROM grants WHERE account_id = :account_id ORDER BY id DESC LIMIT :limit"
)


async def grants(conn: AsyncConnection, account_id: str, *, limit: int) -> list[Any]:
    """The account's grants, newest first."""
    return list((await conn.execute(_GRANTS, {"account_id": account_id, "limit": limit})).all())


# What a hold did to its account: each journal transaction carrying the hold's id.
_HOLD_TRANSACTIONS = text(
    """
    SELECT t.id, t.kind, t.created_at, t.actor, t.reason,
           sum(e.amount) AS amount,
           coalesce(sum(e.amount) FILTER (WHERE e.book = 'hold'), 0) AS held_change
      FROM journal_transactions t
      JOIN journal_entries e ON e.transaction_id = t.id AND e.account_id = :account_id
     WHERE t.hold_id = :hold_id
     GROUP BY t.id ORDER BY t.id
    """
)


async def hold_transactions(conn: AsyncConnection, hold_id: UUID, account_id: str) -> list[Any]:
    return list(
        (await conn.execute(_HOLD_TRANSACTIONS, {"hold_id": hold_id, "account_id": account_id})).all()
    )


# An account's usage: what its settles and true-ups took from its balance, by model or
# by UTC day, with the requests settled and their tokens as the gateway reported them.
_USAGE_KEYS = {"model": "h.model", "day": "to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"}
_USAGE = {
    group: text(
        f"""
        WITH m AS (
          SELECT t.id, t.kind, t.hold_id, t.created_at, sum(e.amount) AS amount
            FROM journal_entries e JOIN journal_transactions t ON t.id = e.transaction_id
           WHERE e.account_id = :account_id AND t.kind IN ('settle', 'true_up')
             AND e.created_at >= :since AND e.created_at < :until
           GROUP BY t.id
        )
        SELECT {key} AS key,
               count(*) FILTER (WHERE m.kind = 'settle') AS requests,
               coalesce(sum(CAST(h.usage ->> 'prompt_tokens' AS bigint))
                        FILTER (WHERE m.kind = 'settle'), 0) AS input_tokens,
               coalesce(sum(CAST(h.usage ->> 'completion_tokens' AS bigint))
                        FILTER (WHERE m.kind = 'settle'), 0) AS output_tokens,
               -sum(m.amount) AS spent
          FROM m JOIN holds h ON h.id = m.hold_id
         GROUP BY 1 ORDER BY 1
        """
    )
    for group, key in _USAGE_KEYS.items()
}


async def usage(
    conn: AsyncConnection, account_id: str, *, group_by: str, since: datetime, until: datetime
) -> list[Any]:
    """Per model or per day: requests, input and output tokens, and the exact amount spent."""
    params = {"account_id": account_id, "since": since, "until": until}
    return list((await conn.execute(_USAGE[group_by], params)).all())
