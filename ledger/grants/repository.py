"""Every SQL statement of the grants domain.

Lock order, as everywhere: the account row first (FOR UPDATE), then its grant rows,
always in consumption order (priority, expires_at, id), so two settles of one account
(already serialized by the account lock) and the expiry job never lock grants in
opposite orders. The expiry job locks with SKIP LOCKED and never waits.

A grant's money is its book `grant:<id>` of the account; `remaining` and `expired` are
moved only by the journal entry trigger (migration 0013).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

GRANT_COLUMNS = (
    "id, account_id, currency, amount, remaining, expired, priority, expires_at, idempotency_key, "
    "request_hash, reason, reference, created_by, expired_at, created_at"
)


def consumption_ctes(account: str, need: str) -> str:
    """Two CTEs, `gl` and `take`: how much of a charge `need` each live grant pays.

    `account` and `need` are SQL expressions (the account id, the amount to cover). `gl` locks the
    account's live grants (remaining > 0, not expired at this transaction's now()) in
    consumption order, FOR UPDATE: the caller has locked the account row first.
    `take` gives each of them min(remaining, what is still uncovered after the grants
    before it) - zero once the charge is covered.
    """
    return f"""gl AS (
      SELECT g.id, g.remaining, g.priority, g.expires_at FROM grants g
       WHERE g.account_id = {account} AND g.remaining > 0 AND g.expires_at > now()
       ORDER BY g.priority, g.expires_at, g.id
       FOR UPDATE OF g
    ), take AS (
      SELECT gl.id,
             least(gl.remaining,
                   greatest(CAST({need} AS numeric) - coalesce(sum(gl.remaining) OVER prior, 0), 0)) AS amount
        FROM gl
      WINDOW prior AS (ORDER BY gl.priority, gl.expires_at, gl.id
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    )"""


_TAKE = text(
    f"WITH {consumption_ctes(':account_id', ':need')} "
    "SELECT id, amount FROM take WHERE amount > 0 ORDER BY id"
)

_INSERT = text(
    f"""
    INSERT INTO grants (id, account_id, currency, amount, priority, expires_at, idempotency_key, request_hash,
                        reason, reference, created_by)
    VALUES (:id, :account_id, :currency, :amount, :priority, :expires_at, :key, :request_hash,
            :reason, :reference, :created_by)
    RETURNING {GRANT_COLUMNS}
    """
)
_GET = text(f"SELECT {GRANT_COLUMNS} FROM grants WHERE id = :id")
_FIND_BY_KEY = text(
    f"SELECT {GRANT_COLUMNS} FROM grants WHERE account_id = :account_id AND idempotency_key = :key"
)
_LIST = text(
    f"SELECT {GRANT_COLUMNS} FROM grants WHERE account_id = :account_id AND id > :after "
    "AND (NOT CAST(:live AS boolean) OR (remaining > 0 AND expires_at > now())) ORDER BY id LIMIT :limit"
)
# Expiry candidates, locking nothing (the batch then locks and checks again).
_EXPIRED_CANDIDATES = text(
    "SELECT id, account_id FROM grants WHERE remaining > 0 AND expires_at <= now() "
    "ORDER BY expires_at, id LIMIT :limit"
)
_LOCK_ACCOUNTS = text(
    "SELECT id FROM accounts WHERE id = ANY(CAST(:ids AS text[])) ORDER BY id FOR UPDATE SKIP LOCKED"
)
_LOCK_EXPIRED = text(
    f"SELECT {GRANT_COLUMNS} FROM grants WHERE id = ANY(CAST(:ids AS uuid[])) "
    "AND account_id = ANY(CAST(:accounts AS text[])) AND remaining > 0 AND expires_at <= now() "
    "ORDER BY account_id, priority, expires_at, id FOR UPDATE SKIP LOCKED"
)


async def take(conn: AsyncConnection, account_id: str, need: Decimal) -> list[tuple[UUID, Decimal]]:
    """Lock the account's live grants and say what each pays of `need` (> 0 only).

    The caller holds the account's row lock."""
    if need <= 0:
        return []
    rows = (await conn.execute(_TAKE, {"account_id": account_id, "need": need})).all()
    return [(r.id, r.amount) for r in rows]


async def insert(conn: AsyncConnection, **params: Any) -> Any:
    return (await conn.execute(_INSERT, params)).one()


async def get(conn: AsyncConnection, grant_id: UUID) -> Any | None:
    return (await conn.execute(_GET, {"id": grant_id})).first()


async def find_by_key(conn: AsyncConnection, account_id: str, key: str) -> Any | None:
    return (await conn.execute(_FIND_BY_KEY, {"account_id": account_id, "key": key})).first()


async def list_page(
    conn: AsyncConnection, account_id: str, *, after: UUID | None, limit: int, live: bool
) -> list[Any]:
    params = {"account_id": account_id, "after": after or UUID(int=0), "limit": limit, "live": live}
    return list((await conn.execute(_LIST, params)).all())


async def expired_candidates(conn: AsyncConnection, limit: int) -> list[Any]:
    return list((await conn.execute(_EXPIRED_CANDIDATES, {"limit": limit})).all())


async def lock_expired(conn: AsyncConnection, candidates: list[Any]) -> tuple[list[Any], bool]:
    """Lock the candidates' accounts (sorted), then the grants still expired with money left;
    both SKIP LOCKED: what another transaction holds is left for the next pass.

    Returns the locked grants and whether every candidate's account was locked (then a
    candidate not returned was expired by someone else meanwhile, not held)."""
    accounts = sorted({c.account_id for c in candidates})
    locked = [r.id for r in (await conn.execute(_LOCK_ACCOUNTS, {"ids": accounts})).all()]
    if not locked:
        return [], False
    params = {"ids": [c.id for c in candidates], "accounts": locked}
    return list((await conn.execute(_LOCK_EXPIRED, params)).all()), len(locked) == len(accounts)
