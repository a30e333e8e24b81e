"""Request and response Structs of the accounts domain."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.schemas import (
    AccountId,
    Currency,
    IdempotencyKey,
    Metadata,
    NonNegativeAmount,
    NonZeroAmount,
    PositiveAmount,
    Reason,
    Reference,
)


class CreateAccount(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    account_id: AccountId
    currency: Currency = "USD"
    credit_limit: NonNegativeAmount = "0"
    metadata: Metadata = {}


class _DepositFields(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    amount: PositiveAmount
    reference: Reference | None = None


class DepositRequest(_DepositFields, frozen=True, kw_only=True):
    """A deposit as the service sees it: the idempotency key resolved (body field or header)."""

    idempotency_key: IdempotencyKey


class DepositBody(_DepositFields, frozen=True, kw_only=True):
    """The deposit on the wire: `idempotency_key` may come in the `Idempotency-Key` header instead."""

    idempotency_key: IdempotencyKey | None = None


class _AdjustmentFields(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    amount: NonZeroAmount
    reason: Reason


class AdjustmentRequest(_AdjustmentFields, frozen=True, kw_only=True):
    """An adjustment as the service sees it: the idempotency key resolved (body field or header)."""

    idempotency_key: IdempotencyKey


class AdjustmentBody(_AdjustmentFields, frozen=True, kw_only=True):
    """The adjustment on the wire: `idempotency_key` may come in the `Idempotency-Key` header instead."""

    idempotency_key: IdempotencyKey | None = None


class UpdateAccount(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """PATCH: the fields given are set (metadata is replaced whole); `reason` is required."""

    reason: Reason
    credit_limit: NonNegativeAmount | msgspec.UnsetType = msgspec.UNSET
    metadata: Metadata | msgspec.UnsetType = msgspec.UNSET


class FreezeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reason: Reason


class Account(msgspec.Struct, frozen=True):
    account_id: str
    currency: str
    credit_limit: str
    balance: str  # paid + granted
    paid: str  # the main and hold books: money deposited (or owed), as before grants
    granted: str  # what the account's grants still hold (consumed before paid)
    held: str
    available: str
    metadata: Metadata
    created_at: str
    frozen: bool = False
    frozen_at: str | None = None
    frozen_reason: str | None = None
    # Set by a settle charged above LEDGER_MAX_OVERAGE_FACTOR x its hold:
    # {"reason", "hold_id", "at"} of the last one; None when nothing asks for review.
    review: dict[str, Any] | None = None
    # the account's price plan and its current revision ({"id", "revision"}); None: list rates
    plan: dict[str, Any] | None = None


class Balance(msgspec.Struct, frozen=True):
    account_id: str
    currency: str
    balance: str  # paid + granted
    paid: str
    granted: str
    held: str
    available: str
    credit_limit: str
    as_of: str | None = None


class Leg(msgspec.Struct, frozen=True):
    account_id: str
    book: str
    amount: str


class JournalTransaction(msgspec.Struct, frozen=True):
    transaction_id: str
    kind: str
    account_id: str
    amount: str
    held_change: str
    balance_after: str
    held_after: str
    actor: str
    created_at: str
    reference: str | None = None
    reason: str | None = None
    hold_id: str | None = None
    entries: list[Leg] = []


class Movement(msgspec.Struct, frozen=True):
    """The answer to a deposit or adjustment."""

    transaction_id: str
    kind: str
    account_id: str
    idempotency_key: str
    amount: str
    currency: str
    balance: str
    created_at: str
    reference: str | None = None
    reason: str | None = None
