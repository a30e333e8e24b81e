"""Every SQL statement of the holds domain's locked path and reads.

The gateway's reserves, settles and releases are written by the batch function
`ledger_hold_batch` (migrations/sql/, sent by `ledger.holds.batch`); the statements here
serve the locked path (`ledger.holds.lifecycle`) and the reads.

Lock order, everywhere: the account row first (FOR UPDATE), then its holds. Every
change to a hold is made while its account row is locked, so the account lock
alone serializes everything that can touch the account's money.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

HOLD_COLUMNS = (
    "id, account_id, idempotency_key, request_hash, state, model, price_version, currency, amount, "
    "reservation, ttl_seconds, expires_at, metadata, usage, gateway_usage, charge, charged, released, "
    "overage, overage_flagged, true_up, resolved_by, resolved_reason, interrupted_at, resolved_at, "
    "created_at, updated_at, budget_key, plan_id, plan_revision"
)

_GET = text(f"SELECT {HOLD_COLUMNS} FROM holds WHERE id = :id")
_GET_BY_KEY = text(  # the unique index holds (account_id, idempotency_key)
    f"SELECT {HOLD_COLUMNS} FROM holds WHERE account_id = :account_id AND idempotency_key = :key"
)
_FIND_BY_KEY = text(
    "SELECT id, request_hash FROM holds WHERE account_id = :account_id AND idempotency_key = :key"
)
_ACCOUNT_CURRENCY = text(
    "SELECT currency, plan_id, plan_revision FROM accounts WHERE id = :id AND kind = 'customer'"
)
_ACTIVE_VERSION = text("SELECT ledger_active_version(:currency)")  # migrations/sql/ledger_active_version.sql

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
       AND (CAST(:model AS text) IS NULL OR model = :model)
       AND (CAST(:budget_key AS text) IS NULL OR budget_key = :budget_key)
       AND (CAST(:start AS timestamptz) IS NULL OR created_at >= :start)
       AND (CAST(:end AS timestamptz) IS NULL OR created_at < :end)
       AND (CAST(:metadata_key AS text) IS NULL
            OR metadata @> jsonb_build_object(CAST(:metadata_key AS text), CAST(:metadata_value AS text)))
       AND id > :after
     ORDER BY id LIMIT :limit
    """
)


def _json(value: Any) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


_HOLD_TERMS = text(
    "SELECT id, account_id, currency, model, price_version, amount, state, "
    "CAST(reservation ->> 'n' AS integer) AS n, plan_id, plan_revision FROM holds WHERE id = :id"
)

# The account's review mark (accounts.review, migration 0007): why, which hold, when (UTC).
_MARK_FOR_REVIEW = text(  # the mark: migrations/sql/ledger_review_mark.sql
    "UPDATE accounts SET review = ledger_review_mark(CAST(:review_reason AS text), "
    "CAST(:review_hold AS text)) WHERE id = :account_id"
)


async def hold_terms(conn: AsyncConnection, hold_id: UUID) -> Any | None:
    """What prices a hold (immutable) and its state now."""
    return (await conn.execute(_HOLD_TERMS, {"id": hold_id})).first()


async def mark_for_review(conn: AsyncConnection, account_id: str, *, reason: str, hold_id: UUID) -> None:
    """Set the account's review mark (the last flagged settle's reason, hold and time)."""
    params = {"account_id": account_id, "review_reason": reason, "review_hold": str(hold_id)}
    await conn.execute(_MARK_FOR_REVIEW, params)


async def find_by_key(conn: AsyncConnection, account_id: str, key: str) -> Any | None:
    return (await conn.execute(_FIND_BY_KEY, {"account_id": account_id, "key": key})).first()


async def account_currency(
    conn: AsyncConnection, account_id: str
) -> tuple[str, tuple[str, int] | None] | None:
    """The account's currency and its current plan revision (None: list rates), in one read."""
    row = (await conn.execute(_ACCOUNT_CURRENCY, {"id": account_id})).first()
    if row is None:
        return None
    return row.currency.strip(), None if row.plan_id is None else (row.plan_id, row.plan_revision)


async def active_version(conn: AsyncConnection, currency: str) -> str | None:
    value: str | None = (await conn.execute(_ACTIVE_VERSION, {"currency": currency})).scalar()
    return value


async def get(conn: AsyncConnection, hold_id: UUID) -> Any | None:
    return (await conn.execute(_GET, {"id": hold_id})).first()


async def get_by_key(conn: AsyncConnection, account_id: str, key: str) -> Any | None:
    """The hold a reserve with this account and idempotency key made (the gateway's request id)."""
    return (await conn.execute(_GET_BY_KEY, {"account_id": account_id, "key": key})).first()


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
    model: str | None = None,
    budget_key: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    metadata: tuple[str, str] | None = None,
) -> list[Any]:
    """Holds by id after `after`, each filter given narrowing (created_at in [start, end);
    `metadata`: a key whose value is that string, by jsonb containment)."""
    params = {
        "state": state,
        "account_id": account_id,
        "older_than": older_than,
        "model": model,
        "budget_key": budget_key,
        "start": start,
        "end": end,
        "metadata_key": metadata[0] if metadata else None,
        "metadata_value": metadata[1] if metadata else None,
        "after": after or UUID(int=0),
        "limit": limit,
    }
    return list((await conn.execute(_LIST, params)).all())
