"""Request and response Structs of the holds domain."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from ledger.budgets.schemas import BudgetKey
from ledger.plans.schemas import PlanRef
from ledger.prices.schemas import Completions, ModelName, Notice, TokenCount, VersionId
from ledger.schemas import AccountId, IdempotencyKey, Metadata, Reason

TtlSeconds = Annotated[int, Meta(ge=1, le=86400)]


class _ReserveFields(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    account_id: AccountId
    model: ModelName
    max_output_tokens: TokenCount | None = None
    max_input_tokens: TokenCount | None = None
    n: Completions | None = None
    price_version: VersionId | None = None
    ttl_seconds: TtlSeconds | None = None
    metadata: Metadata = {}
    # The API key / project the spend counts against (a budget of the account); absent: none.
    # UNSET (not None) so that a reserve without it hashes as it did before budgets existed.
    budget_key: BudgetKey | msgspec.UnsetType = msgspec.UNSET


class ReserveRequest(_ReserveFields, frozen=True, kw_only=True):
    """A reserve as the service sees it: the idempotency key resolved (body field or header)."""

    idempotency_key: IdempotencyKey


class ReserveBody(_ReserveFields, frozen=True, kw_only=True):
    """`POST /v1/holds` on the wire: `idempotency_key` may come in the `Idempotency-Key` header instead."""

    idempotency_key: IdempotencyKey | None = None


class UsageRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    usage: dict[str, Any]


class InterruptRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    usage: dict[str, Any] | None = None


class AdminSettleRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reason: Reason
    usage: dict[str, Any] | None = None


class AdminReleaseRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reason: Reason


class Hold(msgspec.Struct, frozen=True):
    id: str
    account_id: str
    idempotency_key: str
    state: str
    model: str
    price_version: str
    amount: str
    currency: str
    reservation: dict[str, Any]
    ttl_seconds: int
    expires_at: str
    created_at: str
    updated_at: str
    metadata: Metadata
    usage: dict[str, Any] | None
    charge: dict[str, Any] | None
    released: str | None
    overage: str | None
    overage_flagged: bool  # charged above LEDGER_MAX_OVERAGE_FACTOR x amount (account marked for review)
    true_up: str | None
    resolved_by: str | None
    resolved_reason: str | None
    resolved_at: str | None
    interrupted_at: str | None
    budget_key: str | None = None
    # What the journal charged for this request (settle + true-ups); "0" released; null until resolved.
    cost: str | None = None
    # The model's retirement notice (`ledger.prices.notices`): on the reserve's answer and a
    # single hold's GET when the pinned version gives the model a retires_at; absent otherwise.
    notice: Notice | msgspec.UnsetType = msgspec.UNSET
    plan: PlanRef | None = None  # the pinned price plan revision; null: list rates
