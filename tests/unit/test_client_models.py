"""Each of the client's models carries every field of the API answer it reads, and no other.

Compared with the service's own response types (the msgspec Structs the controllers return,
and the pricing engine's `Charge` / `ChargeLine` / `Reservation`, which are what a hold's and a
quote's `charge` and `reservation` hold on the wire): a field the API gains and the client
forgets fails here, and so does one the client invents. A field that the API may send as null
must be optional in the client, and an amount (a decimal string on the wire, or a `Decimal`
in the engine) must be a `Decimal` in the client, never a float or a string.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec
import pytest

import ledger_client
from ledger.accounts import schemas as accounts
from ledger.holds import schemas as holds
from ledger.prices import schemas as prices
from ledger_client import models
from pricing import engine

# The client's model, the service's type it mirrors, and which fields carry money.
PAIRS: list[tuple[type[Any], type[msgspec.Struct], set[str]]] = [
    (models.Hold, holds.Hold, {"amount", "released", "overage", "true_up", "cost"}),
    (models.Balance, accounts.Balance, {"balance", "paid", "granted", "held", "available", "credit_limit"}),
    (models.Charge, engine.Charge, {"amount"}),
    (models.ChargeLine, engine.ChargeLine, {"rate", "amount"}),
    (models.Reservation, engine.Reservation, {"input_rate", "output_rate", "amount"}),
    (models.ChargeQuote, prices.ChargeQuote, set()),
    (models.ReservationQuote, prices.ReservationQuote, set()),
    (models.Notice, prices.Notice, set()),
    (models.PlanRef, holds.PlanRef, set()),
]
CLIENT_ONLY = {"raw"}  # the answer as sent, kept beside the typed fields


def _parts(hint: Any) -> set[Any]:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return set().union(*(_parts(arg) for arg in typing.get_args(hint)))
    return {hint}


def _client_fields(model: type[Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(model)
    return {f.name: hints[f.name] for f in dataclasses.fields(model) if f.name not in CLIENT_ONLY}


def _service_fields(struct: type[msgspec.Struct]) -> dict[str, Any]:
    hints = typing.get_type_hints(struct, include_extras=True)
    return {name: hints[name] for name in struct.__struct_fields__}


@pytest.mark.parametrize(("model", "struct", "money"), PAIRS, ids=[m.__name__ for m, _, _ in PAIRS])
def test_client_model_has_every_field_of_the_api_answer(
    model: type[Any], struct: type[msgspec.Struct], money: set[str]
) -> None:
    client, service = _client_fields(model), _service_fields(struct)
    assert sorted(set(service) - set(client)) == [], f"{model.__name__} lacks fields of the API's answer"
    assert sorted(set(client) - set(service)) == [], f"{model.__name__} has fields the API does not send"
    for name, hint in service.items():
        if type(None) in _parts(hint):
            assert type(None) in _parts(client[name]), f"{model.__name__}.{name} may be null on the wire"
    for name in money:
        assert Decimal in _parts(client[name]), f"{model.__name__}.{name} is money: a Decimal"
        assert not {float, str} & _parts(client[name]), f"{model.__name__}.{name}"


def test_every_model_the_client_exports_is_compared() -> None:
    exported = {
        obj
        for name in ledger_client.__all__
        if dataclasses.is_dataclass(obj := getattr(ledger_client, name))
        and isinstance(obj, type)
        and obj.__module__ == "ledger_client.models"
    }
    assert exported == {model for model, _, _ in PAIRS}


def test_a_hold_answer_parses_every_field_exactly() -> None:
    wire = holds.Hold(
        id="0190f0e0-0000-7000-8000-000000000001",
        account_id="acct-1",
        idempotency_key="k-1",
        state="settled",
        model="claude-sonnet-4-6",
        price_version="pv-1",
        amount="0.021",
        currency="USD",
        reservation={
            "input_allowance": 1000,
            "output_allowance": 1000,
            "n": 1,
            "input_rate": "6",
            "output_rate": "15",
            "tier": "standard",
            "amount": "0.021",
        },
        ttl_seconds=600,
        expires_at="2026-12-07T10:10:00Z",
        created_at="2026-12-07T10:00:00Z",
        updated_at="2026-12-07T10:01:00Z",
        metadata={"request": "r-1"},
        usage={"prompt_tokens": 500, "completion_tokens": 200},
        charge={
            "amount": "0.0045",
            "tier": "standard",
            "lines": [
                {"category": "input", "tokens": 500, "rate": "3", "amount": "0.0015"},
                {"category": "output", "tokens": 200, "rate": "15", "amount": "0.003"},
            ],
        },
        released="0.0165",
        overage="0",
        overage_flagged=False,
        true_up=None,
        resolved_by="admin",
        resolved_reason="ticket 12",
        resolved_at="2026-12-07T10:01:00Z",
        interrupted_at=None,
        budget_key="project-a",
        cost="0.0045",
    )
    hold = models.Hold.from_wire(msgspec.json.decode(msgspec.json.encode(wire)))
    assert (hold.resolved_reason, hold.budget_key, hold.overage, hold.ttl_seconds) == (
        "ticket 12",
        "project-a",
        Decimal(0),
        600,
    )
    assert hold.reservation == models.Reservation(
        1000, 1000, 1, Decimal(6), Decimal(15), "standard", Decimal("0.021")
    )
    assert hold.charge is not None and hold.charge.amount == Decimal("0.0045")
    assert hold.cost == Decimal("0.0045")
    assert hold.resolved_at is not None and hold.resolved_at.utcoffset() is not None
    assert hold.metadata == {"request": "r-1"}


def test_a_number_where_an_amount_is_expected_is_refused() -> None:
    wire = {
        "account_id": "a",
        "currency": "USD",
        "balance": "1",
        "paid": 0.7,  # a float on the wire: never read as money
        "granted": "0.3",
        "held": "0",
        "available": "1",
        "credit_limit": "0",
    }
    with pytest.raises(ValueError, match="decimal string"):
        models.Balance.from_wire(wire)


# The Hold's fields as released, in order: code that builds a Hold positionally relies on it.
RELEASED_HOLD_FIELDS = [
    "id",
    "account_id",
    "idempotency_key",
    "state",
    "model",
    "price_version",
    "amount",
    "currency",
    "reservation",
    "ttl_seconds",
    "expires_at",
    "created_at",
    "updated_at",
    "metadata",
    "usage",
    "charge",
    "released",
    "overage",
    "overage_flagged",
    "true_up",
    "resolved_by",
    "resolved_reason",
    "resolved_at",
    "interrupted_at",
    "budget_key",
    "raw",
]


def test_a_hold_built_positionally_as_released_still_builds() -> None:
    fields = dataclasses.fields(models.Hold)
    assert [f.name for f in fields][: len(RELEASED_HOLD_FIELDS)] == RELEASED_HOLD_FIELDS
    added = fields[len(RELEASED_HOLD_FIELDS) :]
    assert {f.name for f in added} == {"notice", "plan", "cost"}
    assert all(f.default is None for f in added), "a field added later needs a default"
    at = datetime(2026, 12, 7, tzinfo=UTC)
    reservation = models.Reservation(1, 1, 1, Decimal(1), Decimal(1), "standard", Decimal("0.000002"))
    hold = models.Hold(
        "h-1", "a-1", "k-1", "open", "m", "v1", Decimal("0.000002"), "USD", reservation, 600,
        at, at, at, {}, None, None, None, None, False, None, None, None, None, None, None, {},
    )  # fmt: skip
    assert (hold.budget_key, hold.raw, hold.notice, hold.plan, hold.cost) == (None, {}, None, None, None)
