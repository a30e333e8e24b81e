"""Every SQL statement of the accounts domain.

Direct updates of an account row may change only `credit_limit`, `metadata` and the
freeze (`frozen_at`, `frozen_reason`); the database refuses anything else (0011's guard).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

# `grant_books`: the sum of the account's grant books (0013's cache on the grant rows; an
# index-only probe that finds nothing for an account without grants); `lapsed`: the part
# of it in grants past their expires_at, which pays for nothing (0020). So paid =
# balance - grant_books, granted = grant_books - lapsed, available = balance - lapsed +
# credit_limit - held.
COLUMNS = (
    "id, currency, credit_limit, balance, held, metadata, review, created_at, frozen_at, frozen_reason, "
    "plan_id, plan_revision, "
    "(SELECT coalesce(sum(g.remaining), 0) FROM grants g "
    "WHERE g.account_id = accounts.id AND g.remaining > 0) AS grant_books, "
    "ledger_lapsed_grants(accounts.id) AS lapsed"
)

_INSERT = text(
    f"INSERT INTO accounts (id, kind, currency, credit_limit, metadata) "
    f"VALUES (:id, 'customer', :currency, :credit_limit, CAST(:metadata AS jsonb)) "
    f"ON CONFLICT (id) DO NOTHING RETURNING {COLUMNS}"
)
_GET = text(f"SELECT {COLUMNS} FROM accounts WHERE id = :id AND kind = 'customer'")
_LOCK = text(f"SELECT {COLUMNS} FROM accounts WHERE id = :id AND kind = 'customer' FOR UPDATE")
# `below_zero`: no index on balance on purpose (an index on a column that every posting
# updates would end HOT updates of the account row on the hot path); this walks the
# primary key and filters, which is fine for an admin list.
# `review`: None lists every account, true only those marked for review, false the others.
_LIST = text(
    f"SELECT {COLUMNS} FROM accounts WHERE kind = 'customer' AND id > :after "
    "AND (NOT CAST(:below_zero AS boolean) OR balance < 0) "
    "AND (CAST(:review AS boolean) IS NULL OR (review IS NOT NULL) = CAST(:review AS boolean)) "
    "ORDER BY id LIMIT :limit"
)
_UPDATE_TERMS = text(
    f"UPDATE accounts SET credit_limit = :credit_limit, metadata = CAST(:metadata AS jsonb) "
    f"WHERE id = :id AND kind = 'customer' RETURNING {COLUMNS}"
)
_FREEZE = text(
    f"UPDATE accounts SET frozen_at = now(), frozen_reason = :reason "
    f"WHERE id = :id AND kind = 'customer' RETURNING {COLUMNS}"
)
_UNFREEZE = text(
    f"UPDATE accounts SET frozen_at = NULL, frozen_reason = NULL "
    f"WHERE id = :id AND kind = 'customer' RETURNING {COLUMNS}"
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
    conn: AsyncConnection, *, after: str, limit: int, below_zero: bool = False, review: bool | None = None
) -> list[Any]:
    params = {"after": after, "limit": limit, "below_zero": below_zero, "review": review}
    return list((await conn.execute(_LIST, params)).all())


async def update_terms(
    conn: AsyncConnection, account_id: str, *, credit_limit: Decimal, metadata: dict[str, Any]
) -> Any:
    """Set the credit limit and metadata of a locked account; returns the new row."""
    params = {
        "id": account_id,
        "credit_limit": credit_limit,
        "metadata": msgspec.json.encode(metadata).decode(),
    }
    return (await conn.execute(_UPDATE_TERMS, params)).one()


async def freeze(conn: AsyncConnection, account_id: str, *, reason: str) -> Any:
    return (await conn.execute(_FREEZE, {"id": account_id, "reason": reason})).one()


async def unfreeze(conn: AsyncConnection, account_id: str) -> Any:
    return (await conn.execute(_UNFREEZE, {"id": account_id})).one()
