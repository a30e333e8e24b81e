"""Low-balance alerts: configure, read, remove, and list what was recorded.

Invariants:
- at most one alert per account; PUT replaces it. Each change locks the account row
  first (as every posting does), sets `below` from the account's `available` at that
  moment, and is audit-logged with before and after. Setting an alert never sends
  anything: an account already below the threshold is `below` from the start, and the
  next event is its recovery (or, after a recovery, the next downward crossing).
- crossings are detected by the database at the commit of each movement (0014); this
  service never sits on the money path.
- the webhook URL's form is checked (`ledger.alerts.webhook.check_webhook_url`) and its
  destination vetted (`ledger.alerts.destination`: https unless allowed, every address
  the host resolves to public or allow-listed) before anything is written; it is never
  fetched here. A refusal is 422 `webhook_url` and stores nothing.
- a delivery's error detail (refused address, connection error, HTTP status) is shown
  to finance and admin only; a viewer sees that an attempt was or was not delivered,
  nothing that tells a refused connection from a timeout or an HTTP 500.
- DELETE deactivates the alert and cancels its undelivered events; delivered and failed
  events and every attempt stay recorded.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.alerts import repository
from ledger.alerts.destination import DestinationPolicy, DestinationRefused, Resolve, system_resolve
from ledger.alerts.schemas import Alert, AlertConfig, AlertEvent, Delivery
from ledger.alerts.webhook import check_webhook_url
from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import AccountNotFound, AlertNotFound, ValidationFailed
from ledger.money import parse_money
from ledger.schemas import Page, iso
from ledger.settings import Settings
from pricing.money import format_amount, storable

EVENT_TYPES = {"below": "balance.below_threshold", "above": "balance.above_threshold"}


def parse_threshold(value: str) -> Decimal:
    threshold = parse_money(value, param="threshold")
    if not storable(threshold):
        raise ValidationFailed("threshold must be below 10^26 in magnitude", param="threshold")
    return threshold


def alert_view(row: Any, account: Any, *, delivery_enabled: bool) -> Alert:
    return Alert(
        account_id=row.account_id,
        threshold=format_amount(row.threshold),
        webhook_url=row.webhook_url,
        currency=account.currency.strip(),
        state="below" if row.below else "above",
        available=format_amount(account.available),
        delivery_enabled=delivery_enabled,
        created_at=iso(row.created_at),
        updated_at=iso(row.updated_at),
    )


def event_view(row: Any, deliveries: list[Any], *, detail: bool) -> AlertEvent:
    """`detail`: show each attempt's status code and error (finance and admin only)."""
    return AlertEvent(
        id=str(row.event_id),
        type=EVENT_TYPES[row.kind],
        account_id=row.account_id,
        threshold=format_amount(row.threshold),
        available_before=format_amount(row.available_before),
        available_after=format_amount(row.available_after),
        currency=row.currency.strip(),
        at=iso(row.created_at),
        status=row.status,
        attempts=row.attempts,
        next_attempt_at=iso(row.next_attempt_at) if row.status == "pending" else None,
        deliveries=[
            Delivery(
                attempt=d.attempt,
                at=iso(d.at),
                webhook_url=d.webhook_url,
                status_code=d.status_code if detail else None,
                error=d.error if detail else None,
                delivered=d.delivered,
            )
            for d in deliveries
        ],
    )


class AlertService:
    def __init__(self, engine: AsyncEngine, settings: Settings, *, resolve: Resolve = system_resolve) -> None:
        self.engine = engine
        self.delivery_enabled = settings.webhook_secret is not None
        self.policy = DestinationPolicy.of(settings)
        self.resolve_timeout = float(settings.alert_timeout_seconds)
        self.resolve = resolve  # host name -> addresses; the system resolver, or a test's

    async def vet(self, url: str) -> str:
        """`url` if its form is right and its destination allowed now; else 422 `webhook_url`."""
        url = check_webhook_url(url)
        try:
            await asyncio.wait_for(
                asyncio.to_thread(self.policy.vet, url, self.resolve), self.resolve_timeout
            )
        except DestinationRefused as refused:
            raise ValidationFailed(refused.message, param="webhook_url") from refused
        except TimeoutError as error:
            message = "webhook_url's host did not resolve in time"
            raise ValidationFailed(message, param="webhook_url") from error
        return url

    async def configure(self, account_id: str, body: AlertConfig, actor: Actor) -> Alert:
        threshold = parse_threshold(body.threshold)
        if not body.reason.strip():
            raise ValidationFailed("reason must not be blank", param="reason")
        url = await self.vet(body.webhook_url)

        async def work(conn: AsyncConnection) -> Alert:
            account = await repository.lock_account(conn, account_id)
            if account is None:
                raise AccountNotFound(f"account {account_id!r} does not exist", param="account_id")
            before = await repository.get(conn, account_id)
            row = await repository.upsert(
                conn, account_id, threshold=threshold, webhook_url=url, below=account.available < threshold
            )
            await audit.record(
                conn,
                actor=actor.identity,
                role=actor.role,
                action="alert.configure",
                target=account_id,
                reason=body.reason,
                details={
                    "before": (
                        {"threshold": format_amount(before.threshold), "webhook_url": before.webhook_url}
                        if before is not None
                        else None
                    ),
                    "after": {"threshold": format_amount(threshold), "webhook_url": url},
                },
                request_id=actor.request_id,
            )
            return alert_view(row, account, delivery_enabled=self.delivery_enabled)

        return await transaction(self.engine, work)

    async def get(self, account_id: str) -> Alert:
        async with read_only(self.engine) as conn:
            account = await repository.get_account(conn, account_id)
            if account is None:
                raise AccountNotFound(f"account {account_id!r} does not exist")
            row = await repository.get(conn, account_id)
        if row is None:
            raise AlertNotFound(f"account {account_id!r} has no alert")
        return alert_view(row, account, delivery_enabled=self.delivery_enabled)

    async def remove(self, account_id: str, reason: str | None, actor: Actor) -> None:
        if reason is None or not reason.strip():
            raise ValidationFailed("reason must not be blank", param="reason")

        async def work(conn: AsyncConnection) -> None:
            if await repository.lock_account(conn, account_id) is None:
                raise AccountNotFound(f"account {account_id!r} does not exist", param="account_id")
            row = await repository.get(conn, account_id)
            if row is None:
                raise AlertNotFound(f"account {account_id!r} has no alert")
            cancelled = await repository.deactivate(conn, account_id)
            await audit.record(
                conn,
                actor=actor.identity,
                role=actor.role,
                action="alert.remove",
                target=account_id,
                reason=reason,
                details={
                    "threshold": format_amount(row.threshold),
                    "webhook_url": row.webhook_url,
                    "cancelled_events": cancelled,
                },
                request_id=actor.request_id,
            )

        await transaction(self.engine, work)

    async def events(self, account_id: str, *, before: int | None, limit: int, detail: bool) -> Page:
        """The account's recorded crossings, newest first, each with its delivery attempts
        (`detail`: with their status codes and errors)."""
        async with read_only(self.engine) as conn:
            if await repository.get_account(conn, account_id) is None:
                raise AccountNotFound(f"account {account_id!r} does not exist")
            rows = await repository.events(conn, account_id, before=before, limit=limit + 1)
            more = len(rows) > limit
            rows = rows[:limit]
            attempts = await repository.deliveries(conn, [r.id for r in rows])
        by_event: dict[int, list[Any]] = {}
        for attempt in attempts:
            by_event.setdefault(attempt.event_id, []).append(attempt)
        return Page(
            data=[event_view(r, by_event.get(r.id, []), detail=detail) for r in rows],
            next_cursor=str(rows[-1].id) if more and rows else None,
        )
