"""One delivery pass over the alert outbox (the `deliver_alerts` job runs it).

Per event, one short database transaction of its own, never a money transaction:
claim the oldest due pending event (`FOR UPDATE SKIP LOCKED`: a concurrent pass skips
it), POST it, record the attempt in `alert_deliveries`, then mark it delivered (2xx),
failed (the `alert_max_attempts`-th failure) or due again after an exponential backoff
(`alert_retry_base_seconds` x 2^(attempt-1), at most `MAX_BACKOFF_SECONDS`); commit.
The lock is held across the POST, so no event is ever being sent by two passes; a
process that dies after the POST but before the commit leaves the event pending and
it is sent again (at least once): receivers deduplicate on `Idempotency-Key`, which
is the event id.

Each attempt first vets the URL again under the current settings
(`ledger.alerts.destination`: scheme, every resolved address public or allow-listed)
and connects to the addresses it vetted; a refused destination is a failed attempt
(nothing is sent), retried like any other. The attempt's error detail (refused
address, connection error, HTTP status) is recorded and logged; the admin API shows it
to finance and admin only.

Without LEDGER_WEBHOOK_SECRET nothing is sent and nothing is recorded as attempted:
events stay pending until a secret is configured.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import Any

import msgspec
import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.alerts import repository, webhook
from ledger.alerts.destination import DestinationPolicy, DestinationRefused, Resolve, system_resolve
from ledger.alerts.schemas import WebhookPayload
from ledger.alerts.service import EVENT_TYPES
from ledger.db import transaction
from ledger.schemas import iso
from ledger.settings import Settings
from pricing.money import format_amount

log = structlog.get_logger(__name__)

MAX_BACKOFF_SECONDS = 3600
Post = Callable[[str, bytes, dict[str, str]], webhook.Outcome]


def backoff_seconds(attempt: int, base: int) -> int:
    """Delay after the `attempt`-th failure: base, 2 base, 4 base ... capped at an hour."""
    return int(min(base * 2 ** min(attempt - 1, 30), MAX_BACKOFF_SECONDS))


def payload(row: Any) -> bytes:
    return msgspec.json.encode(
        WebhookPayload(
            id=str(row.event_id),
            type=EVENT_TYPES[row.kind],
            account_id=row.account_id,
            threshold=format_amount(row.threshold),
            available_before=format_amount(row.available_before),
            available_after=format_amount(row.available_after),
            currency=row.currency.strip(),
            at=iso(row.created_at),
        )
    )


async def deliver_pending(
    engine: AsyncEngine,
    settings: Settings,
    *,
    resolve: Resolve = system_resolve,
    tls: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """Deliver up to `alert_batch_size` due events; returns counts for the job's summary.

    `resolve` (host names to addresses) and `tls` (the trust store for https receivers)
    default to the system's; tests give their own.
    """
    counts = {"delivered": 0, "retrying": 0, "failed": 0}
    secret = settings.webhook_secret
    if secret is None:
        return {**counts, "sending": False}
    timeout = float(settings.alert_timeout_seconds)
    policy = DestinationPolicy.of(settings)

    def send(url: str, body: bytes, headers: dict[str, str]) -> webhook.Outcome:
        try:
            target = policy.vet(url, resolve)
        except DestinationRefused as refused:
            return webhook.Outcome(False, None, f"refused: {refused.detail}"[:500])
        return webhook.post(target, body, headers, timeout=timeout, tls=tls)

    for _ in range(settings.alert_batch_size):
        outcome = await transaction(
            engine, lambda conn: _deliver_one(conn, settings, secret, send), attempts=1
        )
        if outcome is None:
            break
        counts[outcome] += 1
    return {**counts, "sending": True}


async def _deliver_one(conn: AsyncConnection, settings: Settings, secret: str, send: Post) -> str | None:
    row = await repository.claim_due(conn)
    if row is None:
        return None
    body = payload(row)
    event_id = str(row.event_id)
    headers = {
        webhook.SIGNATURE_HEADER: webhook.signature(secret, body, int(time.time())),
        "Idempotency-Key": event_id,
        "Ledger-Event-Id": event_id,
    }
    try:
        # The socket timeout bounds each connect and read; this bounds the whole call.
        outcome = await asyncio.wait_for(
            asyncio.to_thread(send, row.target_url, body, headers), settings.alert_timeout_seconds * 2
        )
    except TimeoutError:
        outcome = webhook.Outcome(False, None, f"no answer within {settings.alert_timeout_seconds * 2} s")
    attempt = row.attempts + 1
    await repository.record_attempt(
        conn,
        row.id,
        attempt=attempt,
        url=row.target_url,
        status_code=outcome.status_code,
        error=outcome.error,
        delivered=outcome.delivered,
    )
    bound = log.bind(alert_event=event_id, account_id=row.account_id, attempt=attempt)
    if outcome.delivered:
        await repository.finish(conn, row.id, attempt=attempt, status="delivered")
        bound.info("alert.delivered", status_code=outcome.status_code)
        return "delivered"
    if attempt >= settings.alert_max_attempts:
        await repository.finish(conn, row.id, attempt=attempt, status="failed")
        bound.error("alert.failed", error=outcome.error)
        return "failed"
    delay = backoff_seconds(attempt, settings.alert_retry_base_seconds)
    await repository.retry_later(conn, row.id, attempt=attempt, delay=delay)
    bound.warning("alert.retrying", error=outcome.error, retry_in_seconds=delay)
    return "retrying"
