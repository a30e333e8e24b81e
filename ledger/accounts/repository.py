"""Every SQL statement of the accounts domain."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_COLUMNS = "id, currency, credit_limit, balance, held, metadata, review, created_at"

_INSERT = text(
    f"INSERT INTO accounts (id, kind, currency, credit_limit, metadata) "
    f"VALUES (:id, 'customer', :currency, :credit_limit, CAST(:metadata AS jsonb)) "
    f"ON CONFLICT (id) DO NOTHING RETURNING {_COLUMNS}"
)
_GET = text(f"SELECT {_COLUMNS} FROM accounts WHERE id = :id AND kind = 'customer'")
_LOCK = text(f"SELECT {_COLUMNS} FROM accounts WHERE id = :id AND kind = 'customer' FOR UPDATE")
# review: None lists every account, true only those marked for review, false only the others.
_LIST = text(
    f"SELECT {_COLUMNS} FROM accounts WHERE kind = 'customer' AND id > :after "
    "AND (CAST(:review AS boolean) IS NULL OR (review IS NOT NULL) = CAST(:review AS boolean)) "
    "ORDER BY id LIMIT :limit"
)


async def insert(
    conn: AsyncConnection, *, account_id: str, currency: str, credit_limit: Decimal, metadata: dict[str, Any]
) -> Any | None:
    params = {
        "id": account_id,
        "currency": currency,
        "credit_limit": credit_limit,
        "metadata": msgspec.json.encode(metadata).decode(),
    }
    return (await conn.execute(_INSERT, params)).first()


async def get(conn: AsyncConnection, account_id: str) -> Any | None:
    return (await conn.execute(_GET, {"id": account_id})).first()


async def lock(conn: AsyncConnection, account_id: str) -> Any | None:
    """Lock the account row: every money movement on an account takes this lock first."""
    return (await conn.execute(_LOCK, {"id": account_id})).first()


async def list_page(
    conn: AsyncConnection, *, after: str, limit: int, review: bool | None = None
) -> list[Any]:
    return list((await conn.execute(_LIST, {"after": after, "limit": limit, "review": review})).all())
