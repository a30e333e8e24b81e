"""Request and response Structs of the prices domain."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ledger.plans.schemas import PlanRef
from ledger.schemas import AccountId, Currency

ModelName = Annotated[str, Meta(min_length=1, max_length=200)]
VersionId = Annotated[str, Meta(pattern=r"^v[0-9]{1,18}$")]
TokenCount = Annotated[int, Meta(ge=1, le=100_000_000)]
Completions = Annotated[int, Meta(ge=1, le=128)]


class PriceVersion(msgspec.Struct, frozen=True, omit_defaults=True):
    version: str
    content_hash: str
    currency: str
    effective_at: str
    source: str
    published_by: str
    published_at: str
    models: list[str]
    document: dict[str, Any] | None = None
    # Set only on a publish answer: whether this publish created the version (False: the
    # same content was the newest version already), and whether it is active now.
    created: bool | None = None
    active: bool | None = None


class QuoteRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    model: ModelName
    price_version: VersionId | None = None
    # default USD; with account_id, the account's (another currency given is 422)
    currency: Currency | None = None
    usage: dict[str, Any] | None = None
    max_output_tokens: TokenCount | None = None
    max_input_tokens: TokenCount | None = None
    n: Completions | None = None
    # price with this account's current plan, in its currency (404 when unknown)
    account_id: AccountId | None = None


class Notice(msgspec.Struct, frozen=True):
    """What the gateway may pass on to its client about the model: today its retirement
    (`code` `model_retiring` before `retires_at`, `model_retired` after; `ledger.prices.notices`)."""

    code: str
    message: str
    retires_at: str


class ChargeQuote(msgspec.Struct, frozen=True):
    model: str
    price_version: str
    charge: dict[str, Any]
    notice: Notice | msgspec.UnsetType = msgspec.UNSET  # absent: the model has no retires_at
    # with account_id: the plan that priced it ({"id", "revision"}, null: list rates)
    plan: PlanRef | msgspec.UnsetType | None = msgspec.UNSET


class ReservationQuote(msgspec.Struct, frozen=True):
    model: str
    price_version: str
    reservation: dict[str, Any]
    notice: Notice | msgspec.UnsetType = msgspec.UNSET  # absent: the model has no retires_at
    plan: PlanRef | msgspec.UnsetType | None = msgspec.UNSET


RefreshOutcome = Literal["publish", "unchanged", "refuse_rate_move", "refuse_newer_version"]


class PublishResult(msgspec.Struct, frozen=True):
    """What a price refresh decided (`outcome`), and whether it published (never on a dry run).

    `diff` is what the sources change against `against`, the version active now (or the
    newest one when none is active yet); `last_refresh` is the version recorded by the
    previous successful refresh; `newer_version` names a version published by hand after it.
    """

    outcome: RefreshOutcome
    published: bool
    dry_run: bool
    reason: str
    version: PriceVersion | None
    against: str | None = None
    last_refresh: str | None = None
    newer_version: str | None = None
    diff: dict[str, Any] | None = None
    refused_changes: list[dict[str, Any]] = []
