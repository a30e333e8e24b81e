"""Idempotency: the same key with the same body answers the same result; a different body is 409.

Request hashes are SHA-256 over a canonical JSON encoding of the decoded request
(msgspec encodes Struct fields in declaration order), so whitespace or key order
in the client's JSON never matters, but every value does.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.errors import IdempotencyConflict


def request_hash(operation: str, body: Any) -> str:
    payload = msgspec.json.encode([operation, msgspec.to_builtins(body)], order="sorted")
    return hashlib.sha256(payload).hexdigest()


_FIND = text(
    "SELECT request_hash, transaction_id FROM idempotency_keys "
    "WHERE account_id = :account_id AND scope = :scope AND idempotency_key = :key"
)
_INSERT = text(
    "INSERT INTO idempotency_keys (account_id, scope, idempotency_key, request_hash, transaction_id) "
    "VALUES (:account_id, :scope, :key, :hash, :transaction_id)"
)


async def replayed_transaction(
    conn: AsyncConnection, *, account_id: str, scope: str, key: str, digest: str
) -> int | None:
    """The transaction a previous identical request wrote, or None if the key is new.

    The caller holds the account's row lock, so no concurrent request with this key
    can be between this check and `remember`.
    """
    row = (await conn.execute(_FIND, {"account_id": account_id, "scope": scope, "key": key})).first()
    if row is None:
        return None
    if row.request_hash != digest:
        raise IdempotencyConflict(
            f"idempotency_key {key!r} was already used with a different request", param="idempotency_key"
        )
    transaction_id: int = row.transaction_id
    return transaction_id


async def remember(
    conn: AsyncConnection, *, account_id: str, scope: str, key: str, digest: str, transaction_id: int
) -> None:
    await conn.execute(
        _INSERT,
        {
            "account_id": account_id,
            "scope": scope,
            "key": key,
            "hash": digest,
            "transaction_id": transaction_id,
        },
    )
