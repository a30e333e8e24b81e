"""Every SQL statement of the alerts domain.

Crossings are written by the database itself (0014's `accounts_alert_crossing` trigger,
at the commit of each money movement); this module configures alerts, reads events and
moves an event's delivery state. An event is claimed with `FOR UPDATE SKIP LOCKED` and
stays locked until its attempt is recorded, so two delivery passes never send one event
at once.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_ALERT = "account_id, threshold, webhook_url, below, created_at, updated_at"

# `available` as every funds check reads it: expired grants' remainders count for nothing
# (migration 0020's ledger_lapsed_grants).
_AVAILABLE = "balance - ledger_lapsed_grants(id) + credit_limit - held AS available"
_LOCK_ACCOUNT = text(
    f"SELECT id, currency, {_AVAILABLE} FROM accounts WHERE id = :id AND kind = 'customer' FOR UPDATE"
)
_GET_ACCOUNT = text(f"SELECT id, currency, {_AVAILABLE} FROM accounts WHERE id = :id AND kind = 'customer'")
_GET = text(f"SELECT {_ALERT} FROM account_alerts WHERE account_id = :id AND active")
_GET_ANY = text(f"SELECT {_ALERT}, active FROM account_alerts WHERE account_id = :id")
_UPSERT = text(
    f"""
    INSERT INTO account_alerts (account_id, threshold, webhook_url, below)
    VALUES (:id, :threshold, :url, :below)
    ON CONFLICT (account_id) DO UPDATE
       SET threshold = EXCLUDED.threshold, webhook_url = EXCLUDED.webhook_url,
           below = EXCLUDED.below, active = true, updated_at = now()
    RETURNING {_ALERT}
    """
)
_DEACTIVATE = text("UPDATE account_alerts SET active = false, updated_at = now() WHERE account_id = :id")
_CANCEL_PENDING = text(
    "UPDATE alert_events SET status = 'cancelled', finished_at = now() "
    "WHERE account_id = :id AND status = 'pending'"
)
_EVENT = (
    "id, event_id, account_id, kind, threshold, available_before, available_after, currency, "
    "webhook_url, created_at, status, attempts, next_attempt_at"
)
_EVENTS = text(
    f"SELECT {_EVENT} FROM alert_events WHERE account_id = :id AND id < :before ORDER BY id DESC LIMIT :limit"
)
_DELIVERIES = text(
    "SELECT event_id, attempt, at, webhook_url, status_code, error, delivered FROM alert_deliveries "
    "WHERE event_id = ANY(:ids) ORDER BY event_id, attempt"
)
# The target is the alert's current URL (a corrected URL applies to pending events); the
# event's own URL (as configured at the crossing) if the alert row is gone.
_CLAIM = text(
    "SELECT e.id, e.event_id, e.account_id, e.kind, e.threshold, e.available_before, "
    "e.available_after, e.currency, e.created_at, e.attempts, "
    "coalesce(a.webhook_url, e.webhook_url) AS target_url "
    "FROM alert_events e LEFT JOIN account_alerts a ON a.account_id = e.account_id AND a.active "
    "WHERE e.status = 'pending' AND e.next_attempt_at <= now() "
    "ORDER BY e.next_attempt_at, e.id LIMIT 1 FOR UPDATE OF e SKIP LOCKED"
)
_RECORD_ATTEMPT = text(
    "INSERT INTO alert_deliveries (event_id, attempt, webhook_url, status_code, error, delivered) "
    "VALUES (:event, :attempt, :url, :status_code, :error, :delivered)"
)
_FINISH = text(
    "UPDATE alert_events SET status = :status, attempts = :attempt, finished_at = now() WHERE id = :event"
)
_RETRY_LATER = text(
    "UPDATE alert_events SET attempts = :attempt, "
    "next_attempt_at = now() + make_interval(secs => :delay) WHERE id = :event"
)


async def lock_account(conn: AsyncConnection, account_id: str) -> Any | None:
    """Lock the account row: an alert changes in step with the postings (which hold this lock)."""
    return (await conn.execute(_LOCK_ACCOUNT, {"id": account_id})).first()


async def get_account(conn: AsyncConnection, account_id: str) -> Any | None:
    return (await conn.execute(_GET_ACCOUNT, {"id": account_id})).first()


async def get(conn: AsyncConnection, account_id: str) -> Any | None:
    return (await conn.execute(_GET, {"id": account_id})).first()


async def get_any(conn: AsyncConnection, account_id: str) -> Any | None:
    """The alert row even if removed (`active` false)."""
    return (await conn.execute(_GET_ANY, {"id": account_id})).first()


async def upsert(
    conn: AsyncConnection, account_id: str, *, threshold: Decimal, webhook_url: str, below: bool
) -> Any:
    params = {"id": account_id, "threshold": threshold, "url": webhook_url, "below": below}
    return (await conn.execute(_UPSERT, params)).one()


async def deactivate(conn: AsyncConnection, account_id: str) -> int:
    """Remove the alert and cancel its undelivered events; returns how many were cancelled."""
    await conn.execute(_DEACTIVATE, {"id": account_id})
    return (await conn.execute(_CANCEL_PENDING, {"id": account_id})).rowcount


async def events(conn: AsyncConnection, account_id: str, *, before: int | None, limit: int) -> list[Any]:
    params = {"id": account_id, "before": before if before is not None else 2**63 - 1, "limit": limit}
    return list((await conn.execute(_EVENTS, params)).all())


async def deliveries(conn: AsyncConnection, event_ids: list[int]) -> list[Any]:
    if not event_ids:
        return []
    return list((await conn.execute(_DELIVERIES, {"ids": event_ids})).all())


async def claim_due(conn: AsyncConnection) -> Any | None:
    """The oldest due pending event nobody else is delivering, locked until this transaction ends."""
    return (await conn.execute(_CLAIM)).first()


async def record_attempt(
    conn: AsyncConnection,
    event_id: int,
    *,
    attempt: int,
    url: str,
    status_code: int | None,
    error: str | None,
    delivered: bool,
) -> None:
    params = {
        "event": event_id,
        "attempt": attempt,
        "url": url,
        "status_code": status_code,
        "error": error,
        "delivered": delivered,
    }
    await conn.execute(_RECORD_ATTEMPT, params)


async def finish(conn: AsyncConnection, event_id: int, *, attempt: int, status: str) -> None:
    await conn.execute(_FINISH, {"event": event_id, "attempt": attempt, "status": status})


async def retry_later(conn: AsyncConnection, event_id: int, *, attempt: int, delay: float) -> None:
    await conn.execute(_RETRY_LATER, {"event": event_id, "attempt": attempt, "delay": delay})
