"""Request and response Structs of the alerts domain."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ledger.schemas import AmountText, Reason, documented

# What ledger.alerts.webhook.check_webhook_url takes: http(s), a host, no user, port 1-9999
# as documented here (up to 65535 taken), printable ASCII.
WEBHOOK_URL_PATTERN = r"^https?://[A-Za-z0-9._~%!$&'()*+,;=-]+(:[1-9][0-9]{0,3})?([/?#][!-~]*)?$"
WebhookUrl = Annotated[
    str, Meta(min_length=1, max_length=2048, extra_json_schema=documented(WEBHOOK_URL_PATTERN))
]


class AlertConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """PUT: set (or replace) the account's one low-balance alert."""

    threshold: AmountText
    webhook_url: WebhookUrl
    reason: Reason


class Alert(msgspec.Struct, frozen=True):
    """`state`: the side of the threshold the account is on now (`below` means an alert was
    sent, or the account was already below when the alert was set); `delivery_enabled`: false
    while no LEDGER_WEBHOOK_SECRET is configured (crossings are recorded but not sent)."""

    account_id: str
    threshold: str
    webhook_url: str
    currency: str
    state: Literal["above", "below"]
    available: str
    delivery_enabled: bool
    created_at: str
    updated_at: str


class Delivery(msgspec.Struct, frozen=True):
    """One attempt. `status_code` and `error` are null for a viewer (finance and admin see them)."""

    attempt: int
    at: str
    webhook_url: str
    status_code: int | None
    error: str | None
    delivered: bool


class AlertEvent(msgspec.Struct, frozen=True):
    """One crossing, as recorded at the commit of the movement that caused it."""

    id: str
    type: str
    account_id: str
    threshold: str
    available_before: str
    available_after: str
    currency: str
    at: str
    status: Literal["pending", "delivered", "failed", "cancelled"]
    attempts: int
    next_attempt_at: str | None
    deliveries: list[Delivery]


class WebhookPayload(msgspec.Struct, frozen=True):
    """The JSON body POSTed to the webhook (amounts as decimal strings)."""

    id: str
    type: str
    account_id: str
    threshold: str
    available_before: str
    available_after: str
    currency: str
    at: str
