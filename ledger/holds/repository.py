"""Every SQL statement of the holds domain.

Lock order, everywhere: the account row first (FOR UPDATE), then its holds. Every
change to a hold is made while its account row is locked, so the account lock
alone serializes everything that can touch the account's money.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

HOLD_COLUMNS = (
    "id, account_id, idempotency_key, request_hash, state, model, price_version, currency, amount, "
    "reservation, ttl_seconds, expires_at, metadata, usage, gateway_usage, charge, charged, released, "
    "overage, true_up, resolved_by, resolved_reason, interrupted_at, resolved_at, created_at, updated_at"
)

# One round trip: lock the account, find the active price version for its currency and
# any hold already made with this idempotency key.
_LOCK_FOR_RESERVE = text(
    """
    SELECT a.id, a.currency, a.balance, a.held, a.credit_limit,
           (SELECT v.version FROM price_versions v
             WHERE v.currency = a.currency AND v.effective_at <= now()
             ORDER BY v.effective_at DESC, v.id DESC LIMIT 1) AS active_version,
           h.id AS existing_id, h.request_hash AS existing_hash
      FROM accounts a
      LEFT JOIN holds h ON h.account_id = a.id AND h.idempotency_key = :key
     WHERE a.id = :account_id AND a.kind = 'customer'
       FOR UPDATE OF a
    """
)

_INSERT = text(
    f"""
    INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, currency,
                       amount, reservation, ttl_seconds, expires_at, metadata)
    VALUES (:id, :account_id, :key, :request_hash, 'open', :model, :price_version, :currency,
            :amount, CAST(:reservation AS jsonb), :ttl, now() + make_interval(secs => :ttl),
            CAST(:metadata AS jsonb))
    RETURNING {HOLD_COLUMNS}
    """
)

_GET = text(f"SELECT {HOLD_COLUMNS} FROM holds WHERE id = :id")

# Lock the hold's account, then the hold, in one statement. Rows are locked in the order
# of the OF list (account first, as everywhere), and after waiting for a lock PostgreSQL
# re-reads every locked row, so the hold returned is its latest committed version.
_LOCK_HOLD = text(
    "SELECT " + ", ".join(f"h.{c.strip()}" for c in HOLD_COLUMNS.split(",")) + " FROM holds h "
    "JOIN accounts a ON a.id = h.account_id WHERE h.id = :id FOR UPDATE OF a, h"
)

_LIST = text(
    f"""
    SELECT {HOLD_COLUMNS} FROM holds
     WHERE (CAST(:state AS text) IS NULL OR state = :state)
       AND (CAST(:account_id AS text) IS NULL OR account_id = :account_id)
       AND (CAST(:older_than AS timestamptz) IS NULL OR created_at <= :older_than)
       AND id > :after
     ORDER BY id LIMIT :limit
    """
)


def _json(value: Any) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


async def lock_for_reserve(conn: AsyncConnection, account_id: str, key: str) -> Any | None:
    return (await conn.execute(_LOCK_FOR_RESERVE, {"account_id": account_id, "key": key})).first()


async def insert(
    conn: AsyncConnection,
    *,
    hold_id: UUID,
    account_id: str,
    key: str,
    request_hash: str,
    model: str,
    price_version: str,
    currency: str,
    amount: Decimal,
    reservation: dict[str, Any],
    ttl: int,
    metadata: dict[str, Any],
) -> Any:
    params = {
        "id": hold_id,
        "account_id": account_id,
        "key": key,
        "request_hash": request_hash,
        "model": model,
        "price_version": price_version,
        "currency": currency,
        "amount": amount,
        "reservation": _json(reservation),
        "ttl": ttl,
        "metadata": _json(metadata),
    }
    return (await conn.execute(_INSERT, params)).one()


async def get(conn: AsyncConnection, hold_id: UUID) -> Any | None:
    return (await conn.execute(_GET, {"id": hold_id})).first()


async def lock_hold(conn: AsyncConnection, hold_id: UUID) -> Any | None:
    """The hold, with its account row and then its own row locked FOR UPDATE."""
    return (await conn.execute(_LOCK_HOLD, {"id": hold_id})).first()


async def update(conn: AsyncConnection, hold_id: UUID, **changes: Any) -> Any:
    """Update the named columns (jsonb columns given as Python values) and return the row."""
    json_columns = {"usage", "gateway_usage", "charge"}
    sets = []
    params: dict[str, Any] = {"id": hold_id}
    for column, value in changes.items():
        if column == "expires_at" and value == "extend":
            sets.append("expires_at = now() + make_interval(secs => ttl_seconds)")
            continue
        if column in ("resolved_at", "interrupted_at") and value == "now":
            sets.append(f"{column} = now()")
            continue
        if column in json_columns:
            sets.append(f"{column} = CAST(:{column} AS jsonb)")
            params[column] = _json(value)
        else:
            sets.append(f"{column} = :{column}")
            params[column] = value
    statement = text(f"UPDATE holds SET {', '.join(sets)} WHERE id = :id RETURNING {HOLD_COLUMNS}")
    return (await conn.execute(statement, params)).one()


async def list_page(
    conn: AsyncConnection,
    *,
    state: str | None,
    account_id: str | None,
    older_than: datetime | None,
    after: UUID | None,
    limit: int,
) -> list[Any]:
    params = {
        "state": state,
        "account_id": account_id,
        "older_than": older_than,
        "after": after or UUID(int=0),
        "limit": limit,
    }
    return list((await conn.execute(_LIST, params)).all())
