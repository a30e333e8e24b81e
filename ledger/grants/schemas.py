"""Request and response Structs of the grants domain."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ledger.schemas import IdempotencyKey, PositiveAmount, Reason, Reference

# Lower is consumed first. Promotional credit conventionally takes 0-99 and paid
# (purchased) credit 100 and up, so promotional credit is spent before paid credit.
Priority = Annotated[int, Meta(ge=0, le=1000)]
PROMOTIONAL = 0
PAID = 100
ExpiresAt = Annotated[datetime, Meta(tz=True)]
GrantState = Literal["active", "consumed", "expired"]


class _GrantFields(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    amount: PositiveAmount
    expires_at: ExpiresAt
    reason: Reason
    priority: Priority = PAID
    reference: Reference | None = None


class GrantRequest(_GrantFields, frozen=True, kw_only=True):
    """A grant as the service sees it: the idempotency key resolved (body field or header)."""

    idempotency_key: IdempotencyKey


class GrantBody(_GrantFields, frozen=True, kw_only=True):
    """The grant on the wire: `idempotency_key` may come in the `Idempotency-Key` header instead."""

    idempotency_key: IdempotencyKey | None = None


class Grant(msgspec.Struct, frozen=True):
    """`amount` = `remaining` + `consumed` + `expired`; `state` is `expired` from `expires_at` on
    (its remainder is posted out by the expiry job), `consumed` when nothing remains before that."""

    grant_id: str
    account_id: str
    currency: str
    amount: str
    remaining: str
    consumed: str
    expired: str
    state: GrantState
    priority: int
    expires_at: str
    reason: str
    created_by: str
    created_at: str
    idempotency_key: str
    reference: str | None = None
    expired_at: str | None = None
