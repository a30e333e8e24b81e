"""Charges and reservations against hand-computed amounts.

Every expected amount below was worked out by hand (tokens x rate / 1,000,000) and
written down as a decimal string; none is computed with the engine.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from pricing.document import PriceDocument, parse_price_document
from pricing.engine import (
    Charge,
    ChargeLine,
    charge_from_builtins,
    charge_to_builtins,
    check_usage_limits,
    compute_charge,
    reservation_from_builtins,
    reservation_to_builtins,
    size_reservation,
)
from pricing.errors import ModelLimitExceeded, ReservationInvalid
from pricing.examples import contract_price_document, contract_usage
from pricing.usage import Usage, parse_usage


def _document() -> PriceDocument:
    raw = contract_price_document()

    def model(
        name: str, rates: dict[str, str], max_input: int = 100000, max_output: int = 4000
    ) -> dict[str, Any]:
        return {"model": name, "max_input_tokens": max_input, "max_output_tokens": max_output, "rates": rates}

    raw["models"] += [
        model("plain", {"input": "2", "output": "8"}),
        model("reads-only", {"input": "2", "cached_input": "0.2", "output": "8"}),
        model("write-5m-only", {"input": "4", "cache_write_5m": "5", "output": "20"}),
        model("write-1h-only", {"input": "4", "cache_write_1h": "8", "output": "20"}),
        model("write-generic", {"input": "4", "cache_write": "5", "output": "20"}),
        model("free-reads", {"input": "1", "cached_input": "0", "output": "2"}),
        model("micro", {"input": "0.000001", "output": "0.000003"}),
    ]
    return parse_price_document(raw)


DOC = _document()

Line = tuple[str, int, str, str]

CHARGES: list[tuple[str, str, Usage, str, list[Line], str]] = [
    (
        "contract usage on sonnet: every Claude category",
        "claude-sonnet-4-6",
        parse_usage(contract_usage()),
        "standard",
        [
            ("input", 7000, "3", "0.021"),
            ("cached_input", 2000, "0.3", "0.0006"),
            ("cache_write_5m", 1000, "3.75", "0.00375"),
            ("cache_write_1h", 2000, "6", "0.012"),
            ("output", 800, "15", "0.012"),
        ],
        "0.04935",
    ),
    (
        "contract usage on luna: 5m and 1h writes fall back to cache_write",
        "gpt-6-luna",
        parse_usage(contract_usage()),
        "standard",
        [
            ("input", 7000, "2.5", "0.0175"),
            ("cached_input", 2000, "0.25", "0.0005"),
            ("cache_write_5m", 1000, "2.5", "0.0025"),
            ("cache_write_1h", 2000, "2.5", "0.005"),
            ("output", 800, "15", "0.012"),
        ],
        "0.0375",
    ),
    (
        "sonnet: writes without a lifetime fall back to the 5m rate (no cache_write)",
        "claude-sonnet-4-6",
        Usage.from_counts(10000, 100, cache_write_tokens=3000, cache_write_5m=1000, cache_write_1h=500),
        "standard",
        [
            ("input", 7000, "3", "0.021"),
            ("cache_write_5m", 1000, "3.75", "0.00375"),
            ("cache_write_1h", 500, "6", "0.003"),
            ("cache_write", 1500, "3.75", "0.005625"),
            ("output", 100, "15", "0.0015"),
        ],
        "0.034875",
    ),
    (
        "no cache rates at all: every cache line at the input rate",
        "plain",
        Usage.from_counts(
            5000, 100, cached_tokens=1000, cache_write_tokens=500, cache_write_5m=100, cache_write_1h=200
        ),
        "standard",
        [
            ("input", 3500, "2", "0.007"),
            ("cached_input", 1000, "2", "0.002"),
            ("cache_write_5m", 100, "2", "0.0002"),
            ("cache_write_1h", 200, "2", "0.0004"),
            ("cache_write", 200, "2", "0.0004"),
            ("output", 100, "8", "0.0008"),
        ],
        "0.0108",
    ),
    (
        "no cache-write rates: writes at the input rate, reads at cached_input",
        "reads-only",
        Usage.from_counts(5000, 100, cached_tokens=1000, cache_write_tokens=500),
        "standard",
        [
            ("input", 3500, "2", "0.007"),
            ("cached_input", 1000, "0.2", "0.0002"),
            ("cache_write", 500, "2", "0.001"),
            ("output", 100, "8", "0.0008"),
        ],
        "0.009",
    ),
    (
        "only a 5m rate: 1h writes fall to input, lifetime-less writes to the 5m rate",
        "write-5m-only",
        Usage.from_counts(1000, 10, cache_write_tokens=600, cache_write_5m=100, cache_write_1h=200),
        "standard",
        [
            ("input", 400, "4", "0.0016"),
            ("cache_write_5m", 100, "5", "0.0005"),
            ("cache_write_1h", 200, "4", "0.0008"),
            ("cache_write", 300, "5", "0.0015"),
            ("output", 10, "20", "0.0002"),
        ],
        "0.0046",
    ),
    (
        "only a 1h rate: 5m and lifetime-less writes fall to input, never to the 1h rate",
        "write-1h-only",
        Usage.from_counts(1000, 10, cache_write_tokens=600, cache_write_5m=100, cache_write_1h=200),
        "standard",
        [
            ("input", 400, "4", "0.0016"),
            ("cache_write_5m", 100, "4", "0.0004"),
            ("cache_write_1h", 200, "8", "0.0016"),
            ("cache_write", 300, "4", "0.0012"),
            ("output", 10, "20", "0.0002"),
        ],
        "0.005",
    ),
    (
        "only a lifetime-less write rate: 5m and 1h writes fall back to it, not to input",
        "write-generic",
        Usage.from_counts(1000, 10, cache_write_tokens=600, cache_write_5m=100, cache_write_1h=200),
        "standard",
        [
            ("input", 400, "4", "0.0016"),
            ("cache_write_5m", 100, "5", "0.0005"),
            ("cache_write_1h", 200, "5", "0.001"),
            ("cache_write", 300, "5", "0.0015"),
            ("output", 10, "20", "0.0002"),
        ],
        "0.0048",
    ),
    (
        "a rate of 0 exists: reads are free, not charged at input",
        "free-reads",
        Usage.from_counts(1000, 0, cached_tokens=400),
        "standard",
        [("input", 600, "1", "0.0006"), ("cached_input", 400, "0", "0")],
        "0.0006",
    ),
    (
        "luna at exactly the threshold: standard",
        "gpt-6-luna",
        Usage.from_counts(272000, 1000),
        "standard",
        [("input", 272000, "2.5", "0.68"), ("output", 1000, "15", "0.015")],
        "0.695",
    ),
    (
        "luna one token above the threshold: long context for the whole request",
        "gpt-6-luna",
        Usage.from_counts(272001, 1000),
        "long_context",
        [("input", 272001, "5", "1.360005"), ("output", 1000, "22.5", "0.0225")],
        "1.382505",
    ),
    (
        "luna long context: every category at the long rates",
        "gpt-6-luna",
        Usage.from_counts(
            300000,
            2000,
            cached_tokens=100000,
            cache_write_tokens=60000,
            cache_write_5m=10000,
            cache_write_1h=20000,
        ),
        "long_context",
        [
            ("input", 140000, "5", "0.7"),
            ("cached_input", 100000, "0.5", "0.05"),
            ("cache_write_5m", 10000, "5", "0.05"),
            ("cache_write_1h", 20000, "5", "0.1"),
            ("cache_write", 30000, "5", "0.15"),
            ("output", 2000, "22.5", "0.045"),
        ],
        "1.095",
    ),
    (
        "the tier is decided by P before cache reads are subtracted",
        "gpt-6-luna",
        Usage.from_counts(272001, 0, cached_tokens=272001),
        "long_context",
        [("cached_input", 272001, "0.5", "0.1360005")],
        "0.1360005",
    ),
    (
        "reasoning tokens are part of C, charged once as output",
        "claude-sonnet-4-6",
        Usage.from_counts(100, 50, reasoning_tokens=40),
        "standard",
        [("input", 100, "3", "0.0003"), ("output", 50, "15", "0.00075")],
        "0.00105",
    ),
    ("no tokens: no lines, nothing charged", "gpt-5-like-none", Usage.from_counts(0, 0), "standard", [], "0"),
    (
        "exact to 10^-12 with 6-place rates",
        "micro",
        Usage.from_counts(1, 1),
        "standard",
        [("input", 1, "0.000001", "0.000000000001"), ("output", 1, "0.000003", "0.000000000003")],
        "0.000000000004",
    ),
]


@pytest.mark.parametrize(
    ("model", "usage", "tier", "lines", "total"),
    [case[1:] for case in CHARGES],
    ids=[case[0] for case in CHARGES],
)
def test_hand_computed_charges(model: str, usage: Usage, tier: str, lines: list[Line], total: str) -> None:
    price = DOC.model("plain" if model == "gpt-5-like-none" else model)
    charge = compute_charge(price, usage)
    assert charge.tier == tier
    assert [(x.category, x.tokens, x.rate, x.amount) for x in charge.lines] == [
        (c, t, Decimal(r), Decimal(a)) for c, t, r, a in lines
    ]
    assert charge.amount == Decimal(total)
    out = charge_to_builtins(charge)
    assert out["amount"] == total
    assert [(x["category"], x["tokens"], x["rate"], x["amount"]) for x in out["lines"]] == lines
    assert charge_from_builtins(out) == charge


RESERVATIONS: list[tuple[str, str, dict[str, Any], tuple[int, int, int, str, str, str, str]]] = [
    (
        "luna, nothing given: model limits, long context included",
        "gpt-6-luna",
        {},
        (1050000, 128000, 1, "5", "22.5", "long_context", "8.13"),
    ),
    (
        "luna input limited to the threshold: standard rates only",
        "gpt-6-luna",
        {"max_input_tokens": 272000, "max_output_tokens": 1000},
        (272000, 1000, 1, "2.5", "15", "standard", "0.695"),
    ),
    (
        "n completions each get the output allowance",
        "gpt-6-luna",
        {"max_input_tokens": 272000, "max_output_tokens": 1000, "n": 3},
        (272000, 1000, 3, "2.5", "15", "standard", "0.725"),
    ),
    (
        "luna input one above the threshold: long rates included",
        "gpt-6-luna",
        {"max_input_tokens": 272001, "max_output_tokens": 1000},
        (272001, 1000, 1, "5", "22.5", "long_context", "1.382505"),
    ),
    (
        "a request max_input_tokens above the model's is clamped, not refused",
        "gpt-6-luna",
        {"max_input_tokens": 5000000, "max_output_tokens": 1000},
        (1050000, 1000, 1, "5", "22.5", "long_context", "5.2725"),
    ),
    (
        "sonnet: the 1h write is the highest input-side rate; output limit omitted",
        "claude-sonnet-4-6",
        {"n": None},
        (1000000, 128000, 1, "6", "15", "standard", "7.92"),
    ),
    (
        "output exactly at the model limit with n=2",
        "claude-sonnet-4-6",
        {"max_output_tokens": 128000, "n": 2},
        (1000000, 128000, 2, "6", "15", "standard", "9.84"),
    ),
    (
        "no cache rates: input and output only",
        "plain",
        {},
        (100000, 4000, 1, "2", "8", "standard", "0.232"),
    ),
]


@pytest.mark.parametrize(
    ("model", "request_fields", "expected"),
    [case[1:] for case in RESERVATIONS],
    ids=[case[0] for case in RESERVATIONS],
)
def test_hand_computed_reservations(
    model: str, request_fields: dict[str, Any], expected: tuple[int, int, int, str, str, str, str]
) -> None:
    fields: dict[str, Any] = {
        "max_input_tokens": None,
        "max_output_tokens": None,
        "n": None,
        **request_fields,
    }
    reservation = size_reservation(DOC.model(model), **fields)
    a, o, n, input_rate, output_rate, tier, amount = expected
    assert (reservation.input_allowance, reservation.output_allowance, reservation.n) == (a, o, n)
    assert (reservation.input_rate, reservation.output_rate) == (Decimal(input_rate), Decimal(output_rate))
    assert reservation.tier == tier
    assert reservation.amount == Decimal(amount)
    assert reservation_to_builtins(reservation) == {
        "input_allowance": a,
        "output_allowance": o,
        "n": n,
        "input_rate": input_rate,
        "output_rate": output_rate,
        "tier": tier,
        "amount": amount,
    }
    assert reservation_from_builtins(reservation_to_builtins(reservation)) == reservation


def test_output_above_model_limit_is_model_limit_exceeded() -> None:
    with pytest.raises(ModelLimitExceeded) as info:
        size_reservation(DOC.model("gpt-6-luna"), max_input_tokens=None, max_output_tokens=128001, n=None)
    assert info.value.param == "max_output_tokens"
    assert "128000" in info.value.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": -1}, "max_output_tokens"),
        ({"max_output_tokens": 1000.0}, "max_output_tokens"),
        ({"max_input_tokens": 0}, "max_input_tokens"),
        ({"max_input_tokens": "5"}, "max_input_tokens"),
        ({"n": 0}, "n"),
        ({"n": True}, "n"),
        ({"n": 10**7}, "n"),
    ],
)
def test_unusable_request_fields_are_reservation_invalid(fields: dict[str, Any], param: str) -> None:
    args: dict[str, Any] = {"max_input_tokens": None, "max_output_tokens": None, "n": None, **fields}
    with pytest.raises(ReservationInvalid) as info:
        size_reservation(DOC.model("gpt-6-luna"), **args)
    assert info.value.param == param


def test_charge_and_line_shapes() -> None:
    charge = compute_charge(DOC.model("gpt-6-luna"), Usage.from_counts(10, 2))
    assert charge == Charge(
        Decimal("0.000055"),
        "standard",
        (
            ChargeLine("input", 10, Decimal("2.5"), Decimal("0.000025")),
            ChargeLine("output", 2, Decimal(15), Decimal("0.00003")),
        ),
    )


def test_usage_above_the_model_limits_is_refused() -> None:
    """`plain`: max input 100,000, max output 4,000 (per completion)."""
    price = DOC.model("plain")
    check_usage_limits(price, parse_usage({"prompt_tokens": 100000, "completion_tokens": 4000}), n=1)
    check_usage_limits(price, parse_usage({"prompt_tokens": 0, "completion_tokens": 12000}), n=3)
    cases = [
        ({"prompt_tokens": 100001, "completion_tokens": 0}, 1, "usage.prompt_tokens"),
        ({"prompt_tokens": 10**12, "completion_tokens": 1}, 1, "usage.prompt_tokens"),
        ({"prompt_tokens": 1, "completion_tokens": 4001}, 1, "usage.completion_tokens"),
        ({"prompt_tokens": 1, "completion_tokens": 12001}, 3, "usage.completion_tokens"),
    ]
    for raw, n, param in cases:
        with pytest.raises(ModelLimitExceeded) as info:
            check_usage_limits(price, parse_usage(raw), n=n)
        assert info.value.param == param
        assert info.value.message.startswith(param + ": ")
