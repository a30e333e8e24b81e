"""Every SQL statement that writes or reads journal transactions and entries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.journal.postings import Leg, balanced, system_accounts

_SYSTEM_INSERT = text(
    "INSERT INTO accounts (id, kind, currency) SELECT unnest(CAST(:ids AS text[])), 'system', :currency "
    "ON CONFLICT DO NOTHING"
)


async def ensure_system_accounts(conn: AsyncConnection, currency: str) -> None:
    await conn.execute(_SYSTEM_INSERT, {"ids": system_accounts(currency), "currency": currency})


_POST_CACHE: dict[int, Any] = {}


def _post_statement(n_legs: int) -> Any:
    statement = _POST_CACHE.get(n_legs)
    if statement is None:
        values = ", ".join(f"(:a{i}, :b{i}, CAST(:m{i} AS numeric))" for i in range(n_legs))
        statement = text(
            "WITH t AS (INSERT INTO journal_transactions "
            "(kind, account_id, hold_id, reference, reason, actor) "
            "VALUES (:kind, :account_id, :hold_id, :reference, :reason, :actor) RETURNING id, created_at) "
            "INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount) "
            f"SELECT t.id, v.account_id, :currency, v.book, v.amount FROM t, (VALUES {values}) "
            "AS v (account_id, book, amount) "
            "RETURNING transaction_id, account_id, book, amount, balance_after, held_after, created_at"
        )
        _POST_CACHE[n_legs] = statement
    return statement


@dataclass(frozen=True)
class Posted:
    transaction_id: int
    created_at: datetime
    balance_after: Decimal | None  # of the transaction's customer account, when it has one
    held_after: Decimal | None


async def post(
    conn: AsyncConnection,
    *,
    kind: str,
    account_id: str,
    currency: str,
    legs: list[Leg],
    actor: str,
    hold_id: UUID | None = None,
    reference: str | None = None,
    reason: str | None = None,
) -> Posted:
    """Write one balanced journal transaction. The caller holds the account's row lock.

    Zero legs are dropped (the database refuses zero entries); the database checks
    the balance again at commit.
    """
    legs = [leg for leg in legs if leg.amount != 0]
    if len(legs) < 2 or not balanced(legs):
        raise ValueError(f"refusing to post an unbalanced or empty {kind} transaction: {legs}")
    params: dict[str, Any] = {
        "kind": kind,
        "account_id": account_id,
        "hold_id": hold_id,
        "reference": reference,
        "reason": reason,
        "actor": actor,
        "currency": currency,
    }
    for i, leg in enumerate(legs):
        params[f"a{i}"], params[f"b{i}"], params[f"m{i}"] = leg.account_id, leg.book, leg.amount
    rows = (await conn.execute(_post_statement(len(legs)), params)).all()
    mine = [r for r in rows if r.account_id == account_id and r.balance_after is not None]
    last = mine[-1] if mine else None
    return Posted(
        transaction_id=rows[0].transaction_id,
        created_at=rows[0].created_at,
        balance_after=last.balance_after if last else None,
        held_after=last.held_after if last else None,
    )


# Journal transaction kinds (the CHECK constraint on journal_transactions.kind).
KINDS = ("deposit", "adjustment", "reserve", "settle", "release", "true_up", "grant", "grant_expiry")

_ACCOUNT_JOURNAL = text(
    """
    WITH page AS (
      SELECT DISTINCT e.transaction_id FROM journal_entries e
        JOIN journal_transactions t ON t.id = e.transaction_id
       WHERE e.account_id = :account_id AND e.transaction_id < :before
         AND (CAST(:kind AS text) IS NULL OR t.kind = :kind)
         AND (CAST(:since AS timestamptz) IS NULL OR t.created_at >= :since)
         AND (CAST(:until AS timestamptz) IS NULL OR t.created_at < :until)
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

_TRANSACTION_LEGS = text(
    "SELECT transaction_id, account_id, book, amount FROM journal_entries "
    "WHERE transaction_id = ANY(CAST(:ids AS bigint[])) ORDER BY id"
)


async def account_journal(
    conn: AsyncConnection,
    account_id: str,
    *,
    before: int | None,
    limit: int,
    kind: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[list[Any], dict[int, list[Any]]]:
    """The account's journal transactions, newest first; optionally one kind, in [since, until)."""
    params = {
        "account_id": account_id,
        "before": before if before is not None else 2**63 - 1,
        "limit": limit,
        "kind": kind,
        "since": since,
        "until": until,
    }
    rows = (await conn.execute(_ACCOUNT_JOURNAL, params)).all()
    legs: dict[int, list[Any]] = {}
    if rows:
        for leg in (await conn.execute(_TRANSACTION_LEGS, {"ids": [r.id for r in rows]})).all():
            legs.setdefault(leg.transaction_id, []).append(leg)
    return list(rows), legs


# `lapsed`: the part of the grant books in grants whose expires_at had passed at `as_of`
# (they paid for nothing from then on, migration 0020), whether or not the expiry job had
# posted them out by then.
_BALANCE_AS_OF = text(
    "SELECT coalesce(sum(e.amount), 0) AS balance, "
    "coalesce(sum(e.amount) FILTER (WHERE e.book = 'hold'), 0) AS held, "
    "coalesce(sum(e.amount) FILTER (WHERE starts_with(e.book, 'grant:')), 0) AS grant_books, "
    "coalesce(sum(e.amount) FILTER (WHERE starts_with(e.book, 'grant:') AND EXISTS ("
    "  SELECT 1 FROM grants g WHERE g.account_id = e.account_id AND e.book = 'grant:' || g.id "
    "  AND g.expires_at <= :as_of)), 0) AS lapsed "
    "FROM journal_entries e WHERE e.account_id = :account_id AND e.created_at <= :as_of"
)


class PastBalance(NamedTuple):
    balance: Decimal
    held: Decimal
    grant_books: Decimal
    lapsed: Decimal


async def balance_as_of(conn: AsyncConnection, account_id: str, as_of: datetime) -> PastBalance:
    """The account's books from its entries up to `as_of`."""
    row = (await conn.execute(_BALANCE_AS_OF, {"account_id": account_id, "as_of": as_of})).one()
    return PastBalance(row.balance, row.held, row.grant_books, row.lapsed)
