"""Typed answers of the ledger: `Hold`, `Charge`, `Balance`.

Amounts are `Decimal`, parsed from the wire's decimal strings (the ledger never sends a
JSON number for money, and neither does this client); timestamps are aware `datetime`s.
The answer as sent is kept in `raw`, so a field this version does not know is not lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

HoldState = Literal["open", "interrupted", "settled", "released"]


def _amount(value: Any) -> Decimal:
    if not isinstance(value, str):
        raise ValueError(f"an amount must be a decimal string, got {value!r}")
    return Decimal(value)


def _maybe_amount(value: Any) -> Decimal | None:
    return None if value is None else _amount(value)


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class ChargeLine:
    """`amount` = `tokens` x `rate` / 10^6, exactly."""

    category: str
    tokens: int
    rate: Decimal
    amount: Decimal


@dataclass(frozen=True, slots=True)
class Charge:
    """What a hold's usage cost: `amount` is the exact sum of `lines`."""

    amount: Decimal
    tier: str
    lines: tuple[ChargeLine, ...]

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Charge:
        lines = tuple(
            ChargeLine(
                category=str(line["category"]),
                tokens=int(line["tokens"]),
                rate=_amount(line["rate"]),
                amount=_amount(line["amount"]),
            )
            for line in data.get("lines", [])
        )
        return cls(amount=_amount(data["amount"]), tier=str(data["tier"]), lines=lines)


@dataclass(frozen=True, slots=True)
class Hold:
    """A reservation and its fate. `charge`, `released`, `overage` exist once it is charged."""

    id: str
    account_id: str
    idempotency_key: str
    state: HoldState
    model: str
    price_version: str
    amount: Decimal
    currency: str
    reservation: dict[str, Any]
    expires_at: datetime | None
    created_at: datetime | None
    usage: dict[str, Any] | None
    charge: Charge | None
    released: Decimal | None
    overage: Decimal | None
    true_up: Decimal | None
    resolved_by: str | None
    interrupted_at: datetime | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Hold:
        charge = data.get("charge")
        return cls(
            id=str(data["id"]),
            account_id=str(data["account_id"]),
            idempotency_key=str(data["idempotency_key"]),
            state=data["state"],
            model=str(data["model"]),
            price_version=str(data["price_version"]),
            amount=_amount(data["amount"]),
            currency=str(data["currency"]),
            reservation=dict(data.get("reservation") or {}),
            expires_at=_time(data.get("expires_at")),
            created_at=_time(data.get("created_at")),
            usage=data.get("usage"),
            charge=Charge.from_wire(charge) if charge else None,
            released=_maybe_amount(data.get("released")),
            overage=_maybe_amount(data.get("overage")),
            true_up=_maybe_amount(data.get("true_up")),
            resolved_by=data.get("resolved_by"),
            interrupted_at=_time(data.get("interrupted_at")),
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class Balance:
    """`available` = `balance` + `credit_limit` - `held`."""

    account_id: str
    currency: str
    balance: Decimal
    held: Decimal
    available: Decimal
    credit_limit: Decimal

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Balance:
        return cls(
            account_id=str(data["account_id"]),
            currency=str(data["currency"]),
            balance=_amount(data["balance"]),
            held=_amount(data["held"]),
            available=_amount(data["available"]),
            credit_limit=_amount(data["credit_limit"]),
        )
