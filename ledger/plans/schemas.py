"""Request and response Structs of the plans domain."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.schemas import AccountId, Currency, Reason


class PlanRef(msgspec.Struct, frozen=True):
    """A price plan revision as a hold, a quote and a 402 show it."""

    id: str
    revision: int


class CreatePlan(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    plan_id: AccountId  # the id rules of account ids
    currency: Currency
    document: dict[str, Any]
    reason: Reason


class PublishRevision(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    document: dict[str, Any]
    reason: Reason


class AssignPlan(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    plan_id: AccountId | None
    reason: Reason


class PlanRevision(msgspec.Struct, frozen=True, omit_defaults=True):
    plan_id: str
    revision: int
    content_hash: str
    document: dict[str, Any]
    created_at: str
    created_by: str
    reason: str
    # the effective price of every model at `price_version` (the active one unless asked)
    price_version: str | None = None
    rates: list[dict[str, Any]] | None = None


class Plan(msgspec.Struct, frozen=True):
    plan_id: str
    currency: str
    revision: int  # the current revision
    created_at: str
    created_by: str


class AccountPlan(msgspec.Struct, frozen=True):
    account_id: str
    plan: dict[str, Any] | None  # {"id", "revision"}, or null: list rates
