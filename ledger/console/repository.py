"""The console's own read: account search (the accounts API lists by id only).

A case-insensitive substring match on the account id, cursor-paginated by id like
`GET /admin/v1/accounts`; `%`, `_` and `\\` in the query are matched literally.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.accounts.repository import COLUMNS

# The same columns as the accounts API, so `accounts.service.view` renders a row.
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
