"""Typed answers of the ledger's gateway API: `Hold`, `Balance`, `Charge`, `Reservation`, quotes,
and the `Notice` of a retiring model.

Invariants:
- every field of the API's answer is a field here, named as on the wire (the tests compare
  each model with the service's response Struct, so a field the API gains and this module
  forgets fails them);
- amounts and rates are `Decimal`, parsed from the wire's decimal strings: the ledger never
  sends a JSON number for money and a number where an amount is expected is refused
  (`ValueError`), never read as a float; timestamps are aware `datetime`s;
- the answer as sent is kept in `raw` (`Hold`, `Balance`), so a field a newer ledger adds is
  not lost before this client learns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

HoldState = Literal["open", "interrupted", "settled", "released"]
Tier = Literal["standard", "long_context"]


def _amount(value: Any) -> Decimal:
    if not isinstance(value, str):
        raise ValueError(f"an amount must be a decimal string, got {value!r}")
    return Decimal(value)


def _maybe_amount(value: Any) -> Decimal | None:
    return None if value is None else _amount(value)


def _time(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _maybe_time(value: Any) -> datetime | None:
    return None if value is None else _time(value)


@dataclass(frozen=True, slots=True)
class ChargeLine:
    """One priced category: `amount` = `tokens` x `rate` / 10^6, exactly (`rate` per 1M tokens)."""

    category: str
    tokens: int
    rate: Decimal
    amount: Decimal


@dataclass(frozen=True, slots=True)
class Charge:
    """What a usage cost: `amount` is the exact sum of `lines` (zero-token lines left out)."""

    amount: Decimal
    tier: Tier
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
        return cls(amount=_amount(data["amount"]), tier=data["tier"], lines=lines)


@dataclass(frozen=True, slots=True)
class Reservation:
    """How a hold was sized: `amount` = `input_allowance` x `input_rate` / 10^6 +
    `output_allowance` x `n` x `output_rate` / 10^6 (rates per 1M tokens, the highest the
    tier can charge)."""

    input_allowance: int
    output_allowance: int
    n: int
    input_rate: Decimal
    output_rate: Decimal
    tier: Tier
    amount: Decimal

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Reservation:
        return cls(
            input_allowance=int(data["input_allowance"]),
            output_allowance=int(data["output_allowance"]),
            n=int(data["n"]),
            input_rate=_amount(data["input_rate"]),
            output_rate=_amount(data["output_rate"]),
            tier=data["tier"],
            amount=_amount(data["amount"]),
        )


@dataclass(frozen=True, slots=True)
class Notice:
    """What the gateway may pass on about the model: `code` `model_retiring` before
    `retires_at`, `model_retired` after (requests for it are then refused with 410)."""

    code: str
    message: str
    retires_at: datetime

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Notice:
        return cls(code=str(data["code"]), message=str(data["message"]), retires_at=_time(data["retires_at"]))


def _maybe_notice(value: Any) -> Notice | None:
    return Notice.from_wire(value) if value else None


@dataclass(frozen=True, slots=True)
class PlanRef:
    """A price plan revision: what a hold pinned, what priced a quote."""

    id: str
    revision: int

    @classmethod
    def from_wire(cls, data: dict[str, Any] | None) -> PlanRef | None:
        return None if not data else cls(str(data["id"]), int(data["revision"]))


@dataclass(frozen=True, slots=True)
class Hold:
    """A reservation and its fate. `charge`, `released`, `true_up` exist once it is charged;
    `resolved_*` once it is settled or released."""

    id: str
    account_id: str
    idempotency_key: str
    state: HoldState
    model: str
    price_version: str
    amount: Decimal
    currency: str
    reservation: Reservation
    ttl_seconds: int
    expires_at: datetime
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]
    usage: dict[str, Any] | None
    charge: Charge | None
    released: Decimal | None
    overage: Decimal | None
    overage_flagged: bool
    true_up: Decimal | None
    resolved_by: str | None
    resolved_reason: str | None
    resolved_at: datetime | None
    interrupted_at: datetime | None
    budget_key: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    # Fields added after `raw` have defaults and go at the end, so code that builds a Hold
    # positionally keeps working.
    # on a reserve's answer, a GET and a by-key lookup, while the model has a retires_at
    notice: Notice | None = None
    plan: PlanRef | None = None  # the pinned price plan revision; None: list rates
    # The request's cost: what the ledger charged for it (true-ups included); 0 once released
    # without a charge; None while open or interrupted.
    cost: Decimal | None = None

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
            reservation=Reservation.from_wire(data["reservation"]),
            ttl_seconds=int(data["ttl_seconds"]),
            expires_at=_time(data["expires_at"]),
            created_at=_time(data["created_at"]),
            updated_at=_time(data["updated_at"]),
            metadata=dict(data.get("metadata") or {}),
            usage=data.get("usage"),
            charge=Charge.from_wire(charge) if charge else None,
            released=_maybe_amount(data.get("released")),
            overage=_maybe_amount(data.get("overage")),
            overage_flagged=bool(data.get("overage_flagged", False)),
            true_up=_maybe_amount(data.get("true_up")),
            resolved_by=data.get("resolved_by"),
            resolved_reason=data.get("resolved_reason"),
            resolved_at=_maybe_time(data.get("resolved_at")),
            interrupted_at=_maybe_time(data.get("interrupted_at")),
            budget_key=data.get("budget_key"),
            raw=data,
            notice=_maybe_notice(data.get("notice")),
            plan=PlanRef.from_wire(data.get("plan")),
            cost=_maybe_amount(data.get("cost")),
        )


@dataclass(frozen=True, slots=True)
class Balance:
    """`balance` = `paid` + `granted`; `available` = `balance` + `credit_limit` - `held`."""

    account_id: str
    currency: str
    balance: Decimal
    paid: Decimal
    granted: Decimal
    held: Decimal
    available: Decimal
    credit_limit: Decimal
    as_of: datetime | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Balance:
        return cls(
            account_id=str(data["account_id"]),
            currency=str(data["currency"]),
            balance=_amount(data["balance"]),
            paid=_amount(data["paid"]),
            granted=_amount(data["granted"]),
            held=_amount(data["held"]),
            available=_amount(data["available"]),
            credit_limit=_amount(data["credit_limit"]),
            as_of=_maybe_time(data.get("as_of")),
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class ChargeQuote:
    """`POST /v1/quotes` with a usage: what a settle at `price_version` would charge."""

    model: str
    price_version: str
    charge: Charge
    notice: Notice | None = None
    plan: PlanRef | None = None  # with account_id: the plan that priced it


@dataclass(frozen=True, slots=True)
class ReservationQuote:
    """`POST /v1/quotes` without a usage: what a reserve at `price_version` would hold."""

    model: str
    price_version: str
    reservation: Reservation
    notice: Notice | None = None
    plan: PlanRef | None = None  # with account_id: the plan that sized it


def quote_from_wire(data: dict[str, Any]) -> ChargeQuote | ReservationQuote:
    """The quote the answer is: a charge quote when it carries `charge`, else a reservation quote."""
    notice = _maybe_notice(data.get("notice"))
    plan = PlanRef.from_wire(data.get("plan"))
    if "charge" in data:
        return ChargeQuote(
            str(data["model"]), str(data["price_version"]), Charge.from_wire(data["charge"]), notice, plan
        )
    return ReservationQuote(
        str(data["model"]),
        str(data["price_version"]),
        Reservation.from_wire(data["reservation"]),
        notice,
        plan,
    )
