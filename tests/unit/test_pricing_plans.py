"""Price plans (pricing/plans.py): validation, hash stability, the materialisation rule,
and Hypothesis properties against an independent oracle in integer units of 10^-6."""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.document import MAX_RATE, parse_price_document
from pricing.engine import compute_charge
from pricing.errors import PriceDocumentInvalid
from pricing.plans import (
    PlanRateTooHigh,
    adjusted_rate,
    materialise,
    parse_plan_document,
    plan_hash,
    plan_to_builtins,
)
from pricing.usage import parse_usage

FAST = settings(max_examples=300, deadline=None, database=None)

LIST = {
    "currency": "USD",
    "models": [
        {
            "model": "gpt-5",
            "max_input_tokens": 400000,
            "max_output_tokens": 128000,
            "rates": {"input": "1.25", "cached_input": "0.125", "output": "10"},
        },
        {
            "model": "long",
            "max_input_tokens": 1000000,
            "max_output_tokens": 64000,
            "rates": {"input": "3", "output": "15"},
            "long_context": {"above_input_tokens": 200000, "rates": {"input": "6", "output": "22.5"}},
        },
        {
            "model": "other",
            "max_input_tokens": 1000,
            "max_output_tokens": 100,
            "rates": {"input": "0.000001", "output": "0.000003"},
        },
    ],
}


def price_doc() -> Any:
    return parse_price_document(LIST)


# --- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({"adjust_percent": -10}, "adjust_percent"),  # a JSON number
        ({"adjust_percent": "-100.00001"}, "adjust_percent"),  # 5 places
        ({"adjust_percent": "-100.0001"}, "adjust_percent"),  # below -100
        ({"adjust_percent": "1000.0001"}, "adjust_percent"),  # above 1000
        ({"adjust_percent": "1e2"}, "adjust_percent"),
        ({"discount": "10"}, "discount"),
        (
            {"models": {"gpt-5": {"adjust_percent": "5", "rates": {"input": "1", "output": "2"}}}},
            "models.gpt-5",
        ),
        ({"models": {"gpt-5": {"rates": {"input": "1"}}}}, "models.gpt-5.rates.output"),
        ({"models": {"gpt-5": {"rates": {"input": "1.0000001", "output": "2"}}}}, "models.gpt-5.rates.input"),
        ({"models": {"gpt-5": {"rates": {"input": "1000001", "output": "2"}}}}, "models.gpt-5.rates.input"),
        (
            {"models": {"gpt-5": {"rates": {"input": "1", "output": "2", "cachedinput": "1"}}}},
            "models.gpt-5.rates.cachedinput",
        ),
        ({"models": {"gpt-5": {}}}, "models.gpt-5.rates"),
        ({"models": {"=cmd": {"adjust_percent": "1"}}}, "models.=cmd"),
        (
            {
                "models": {
                    "gpt-5": {
                        "rates": {"input": "1", "output": "2"},
                        "long_context": {"rates": {"input": "1", "output": "2", "cache_write": "1"}},
                    }
                }
            },
            "models.gpt-5.long_context.rates.cache_write",
        ),
        ({"models": []}, "models"),
    ],
)
def test_invalid_plan_documents_are_refused_naming_the_field(raw: dict[str, Any], param: str) -> None:
    with pytest.raises(PriceDocumentInvalid) as caught:
        parse_plan_document(raw)
    assert caught.value.param == param


def test_a_repeated_key_is_refused() -> None:
    with pytest.raises(PriceDocumentInvalid) as caught:
        parse_plan_document('{"adjust_percent": "1", "adjust_percent": "2"}')
    assert caught.value.param == "adjust_percent"
    with pytest.raises(PriceDocumentInvalid):
        parse_plan_document('{"models": {"a": {"adjust_percent": "1"}, "a": {"adjust_percent": "2"}}}')


def test_bounds_are_inclusive_and_default_is_zero() -> None:
    assert parse_plan_document({"adjust_percent": "-100"}).adjust_percent == -100
    assert parse_plan_document({"adjust_percent": "1000"}).adjust_percent == 1000
    assert parse_plan_document({}).adjust_percent == 0


def test_hash_is_stable_across_spelling_and_order() -> None:
    a = parse_plan_document(
        '{"adjust_percent": "-10.00", "models": {"z": {"adjust_percent": "5"}, '
        '"a": {"rates": {"output": "2.50", "input": "1"}}}}'
    )
    b = parse_plan_document(
        '{"models": {"a": {"rates": {"input": "1.0", "output": "2.5"}}, "z": {"adjust_percent": "5.0"}},'
        ' "adjust_percent": "-10"}'
    )
    assert plan_hash(a) == plan_hash(b)
    assert plan_hash(a) == plan_hash(parse_plan_document(plan_to_builtins(a)))
    assert parse_plan_document(plan_to_builtins(a)) == a
    assert plan_hash(a) != plan_hash(parse_plan_document({"adjust_percent": "-10"}))
    # pinned: a change of the canonical form would change every stored revision's hash
    canonical = json.dumps(plan_to_builtins(a), sort_keys=True, separators=(",", ":"))
    assert canonical == (
        '{"adjust_percent":"-10","models":{"a":{"rates":{"input":"1","output":"2.5"}},'
        '"z":{"adjust_percent":"5"}}}'
    )


# --- materialisation -----------------------------------------------------------------


def test_precedence_override_then_model_percent_then_plan_percent() -> None:
    plan = parse_plan_document(
        {
            "adjust_percent": "-10",
            "models": {
                "gpt-5": {"adjust_percent": "20"},
                "long": {"rates": {"input": "2", "output": "9"}},
                "unlisted": {"adjust_percent": "50"},
            },
        }
    )
    prices = {p.model: p for p in materialise(plan, price_doc())}
    assert set(prices) == {"gpt-5", "long", "other"}
    assert prices["gpt-5"].rates.items() == (
        ("input", Decimal("1.5")),
        ("cached_input", Decimal("0.15")),
        ("output", Decimal("12")),
    )
    # an override without long_context: its standard rates in both tiers, same threshold
    assert prices["long"].rates.items() == (("input", Decimal(2)), ("output", Decimal(9)))
    assert prices["long"].long_context is not None
    assert prices["long"].long_context.above_input_tokens == 200000
    assert prices["long"].long_context.rates == prices["long"].rates
    assert prices["long"].max_input_tokens == 1000000 and prices["long"].max_output_tokens == 64000
    # the plan-wide percent, rounded half up at 6 places: 0.000001 x 0.9 = 0.0000009 -> 0.000001
    assert prices["other"].rates["input"] == Decimal("0.000001")
    assert prices["other"].rates["output"] == Decimal("0.000003")  # 0.0000027 -> 0.000003


def test_override_long_context_is_used_or_ignored() -> None:
    plan = parse_plan_document(
        {
            "models": {
                "long": {
                    "rates": {"input": "2", "output": "9"},
                    "long_context": {"rates": {"input": "4", "output": "11"}},
                },
                "gpt-5": {
                    "rates": {"input": "1", "output": "2"},
                    "long_context": {"rates": {"input": "4", "output": "11"}},
                },
            }
        }
    )
    prices = {p.model: p for p in materialise(plan, price_doc())}
    assert prices["long"].long_context is not None
    assert prices["long"].long_context.rates.items() == (("input", Decimal(4)), ("output", Decimal(11)))
    assert prices["gpt-5"].long_context is None  # the list model has no long-context table


@pytest.mark.parametrize(
    ("rate", "percent", "expected"),
    [
        ("0.000001", "-50", "0.000001"),  # 0.0000005: half up
        ("0.000001", "-50.0001", "0"),  # 0.000000499999
        ("0.000003", "-50", "0.000002"),  # 0.0000015 -> 0.000002
        ("1.234567", "-10", "1.111110"),  # 1.1111103 -> 1.111110
        ("1.234567", "0.0001", "1.234568"),  # 1.23456823... -> 1.234568
        ("2.5", "-100", "0"),
        ("15", "1000", "165"),
        ("0.000005", "-10", "0.000005"),  # 0.0000045 -> 0.000005
    ],
)
def test_rounding_edges(rate: str, percent: str, expected: str) -> None:
    assert adjusted_rate(Decimal(rate), Decimal(percent)) == Decimal(expected)


def test_an_effective_rate_above_max_rate_refuses() -> None:
    doc = parse_price_document(
        {
            "currency": "USD",
            "models": [
                {
                    "model": "big",
                    "max_input_tokens": 10,
                    "max_output_tokens": 10,
                    "rates": {"input": "100000", "output": "1"},
                }
            ],
        }
    )
    with pytest.raises(PlanRateTooHigh) as caught:
        materialise(parse_plan_document({"adjust_percent": "900.0001"}), doc)
    assert caught.value.param == "models.big.rates.input"
    assert materialise(parse_plan_document({"adjust_percent": "900"}), doc)[0].rates["input"] == MAX_RATE


# --- properties against an independent oracle ------------------------------------------

MICROS = st.integers(0, 10**9)  # a list rate in units of 10^-6 (up to 1000 per 1M tokens)
PERCENT_UNITS = st.integers(-1_000_000, 10_000_000)  # a percent in units of 10^-4, [-100, 1000]


def oracle_rate(list_micros: int, percent_units: int) -> int:
    """The effective rate in units of 10^-6: list x (100 + p) / 100, half up, in integers.

    (100 + p) / 100 = (10^6 + P) / 10^6 with P the percent in units of 10^-4."""
    numerator = list_micros * (1_000_000 + percent_units)
    denominator = 1_000_000
    return (2 * numerator + denominator) // (2 * denominator)


def as_text(units: int, places: int) -> str:
    sign = "-" if units < 0 else ""
    whole, frac = divmod(abs(units), 10**places)
    return f"{sign}{whole}.{frac:0{places}d}"


@FAST
@given(
    input_micros=MICROS,
    cached_micros=MICROS,
    output_micros=MICROS,
    percent=PERCENT_UNITS,
    model_percent=st.none() | PERCENT_UNITS,
    prompt=st.integers(0, 400_000),
    cached_share=st.integers(0, 400_000),
    completion=st.integers(0, 128_000),
)
def test_planned_charge_equals_the_oracle(
    input_micros: int,
    cached_micros: int,
    output_micros: int,
    percent: int,
    model_percent: int | None,
    prompt: int,
    cached_share: int,
    completion: int,
) -> None:
    doc = parse_price_document(
        {
            "currency": "USD",
            "models": [
                {
                    "model": "m",
                    "max_input_tokens": 400_000,
                    "max_output_tokens": 128_000,
                    "rates": {
                        "input": as_text(input_micros, 6),
                        "cached_input": as_text(cached_micros, 6),
                        "output": as_text(output_micros, 6),
                    },
                }
            ],
        }
    )
    raw: dict[str, Any] = {"adjust_percent": as_text(percent, 4)}
    if model_percent is not None:
        raw["models"] = {"m": {"adjust_percent": as_text(model_percent, 4)}}
    used = percent if model_percent is None else model_percent
    expected = {
        c: oracle_rate(m, used)
        for c, m in (("input", input_micros), ("cached_input", cached_micros), ("output", output_micros))
    }
    if max(expected.values()) > 10**12:  # above MAX_RATE: refused
        with pytest.raises(PlanRateTooHigh):
            materialise(parse_plan_document(raw), doc)
        return
    (price,) = materialise(parse_plan_document(raw), doc)
    # (a) the materialised rates are the oracle's
    for category, micros in expected.items():
        assert Fraction(price.rates[category]) == Fraction(micros, 10**6)
    # (b) a charge of usage at the materialised price is the oracle's exact sum
    cached = min(cached_share, prompt)
    usage = parse_usage(
        {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
    )
    charge = compute_charge(price, usage)
    oracle = Fraction(
        (prompt - cached) * expected["input"]
        + cached * expected["cached_input"]
        + completion * expected["output"],
        10**12,
    )
    assert Fraction(charge.amount) == oracle
    assert charge.amount == charge.amount.quantize(Decimal("1e-12"))


@FAST
@given(std=st.tuples(MICROS, MICROS), long=st.tuples(MICROS, MICROS), percent=PERCENT_UNITS)
def test_both_tiers_are_materialised_by_the_rule(
    std: tuple[int, int], long: tuple[int, int], percent: int
) -> None:
    doc = parse_price_document(
        {
            "currency": "USD",
            "models": [
                {
                    "model": "m",
                    "max_input_tokens": 1000,
                    "max_output_tokens": 10,
                    "rates": {"input": as_text(std[0], 6), "output": as_text(std[1], 6)},
                    "long_context": {
                        "above_input_tokens": 10,
                        "rates": {"input": as_text(long[0], 6), "output": as_text(long[1], 6)},
                    },
                }
            ],
        }
    )
    expected = [oracle_rate(m, percent) for m in (*std, *long)]
    plan = parse_plan_document({"adjust_percent": as_text(percent, 4)})
    if max(expected) > 10**12:
        with pytest.raises(PlanRateTooHigh):
            materialise(plan, doc)
        return
    (price,) = materialise(plan, doc)
    assert price.long_context is not None
    got = [
        price.rates["input"],
        price.rates["output"],
        price.long_context.rates["input"],
        price.long_context.rates["output"],
    ]
    assert [Fraction(g) for g in got] == [Fraction(e, 10**6) for e in expected]


def test_an_override_omitting_a_category_takes_the_list_rate_under_the_plan_percent() -> None:
    doc = parse_price_document(
        {
            "currency": "USD",
            "models": [
                {
                    "model": "m",
                    "max_input_tokens": 1000,
                    "max_output_tokens": 10,
                    "rates": {"input": "3", "cached_input": "0.3", "output": "15"},
                    "long_context": {
                        "above_input_tokens": 100,
                        "rates": {"input": "6", "cached_input": "0.6", "output": "22.5"},
                    },
                }
            ],
        }
    )
    (price,) = materialise(
        parse_plan_document({"models": {"m": {"rates": {"input": "1", "output": "2"}}}}), doc
    )
    assert price.rates.items() == (
        ("input", Decimal(1)),
        ("cached_input", Decimal("0.3")),  # the list's, not the override's input (1)
        ("output", Decimal(2)),
    )
    assert price.long_context is not None
    assert price.long_context.rates.items() == (
        ("input", Decimal(1)),
        ("cached_input", Decimal("0.6")),
        ("output", Decimal(2)),
    )
    plan = parse_plan_document(
        {
            "adjust_percent": "-10",
            "models": {
                "m": {
                    "rates": {"input": "1", "output": "2"},
                    "long_context": {"rates": {"input": "4", "output": "5"}},
                }
            },
        }
    )
    (price,) = materialise(plan, doc)
    assert price.rates.items() == (
        ("input", Decimal(1)),
        ("cached_input", Decimal("0.27")),
        ("output", Decimal(2)),
    )
    assert price.long_context is not None
    assert price.long_context.rates.items() == (
        ("input", Decimal(4)),
        ("cached_input", Decimal("0.54")),
        ("output", Decimal(5)),
    )
    # an override category the list does not price is kept (both tiers give it)
    (price,) = materialise(
        parse_plan_document({"models": {"m": {"rates": {"input": "1", "output": "2", "cache_write": "4"}}}}),
        doc,
    )
    assert set(price.rates.categories()) == {"input", "cached_input", "output", "cache_write"}
    assert price.long_context is not None
    assert price.long_context.rates.categories() == price.rates.categories()


CATEGORIES_ORACLE = ("input", "cached_input", "output")


@FAST
@given(
    std=st.tuples(MICROS, MICROS, MICROS),
    long=st.tuples(MICROS, MICROS, MICROS),
    percent=PERCENT_UNITS,
    given_std=st.dictionaries(st.sampled_from(CATEGORIES_ORACLE), st.integers(0, 10**12)),
    given_long=st.none() | st.tuples(st.integers(0, 10**12), st.integers(0, 10**12), st.integers(0, 10**12)),
)
def test_an_override_merges_with_the_list_by_the_rule(
    std: tuple[int, int, int],
    long: tuple[int, int, int],
    percent: int,
    given_std: dict[str, int],
    given_long: tuple[int, int, int] | None,
) -> None:
    """Oracle: per tier, a category the override gives is the override's rate; any other
    the list prices is the list rate x (100 + plan percent) / 100, half up, in integers."""
    given_std = {**given_std, "input": given_std.get("input", 7), "output": given_std.get("output", 9)}
    doc = parse_price_document(
        {
            "currency": "USD",
            "models": [
                {
                    "model": "m",
                    "max_input_tokens": 1000,
                    "max_output_tokens": 10,
                    "rates": {c: as_text(m, 6) for c, m in zip(CATEGORIES_ORACLE, std, strict=True)},
                    "long_context": {
                        "above_input_tokens": 10,
                        "rates": {c: as_text(m, 6) for c, m in zip(CATEGORIES_ORACLE, long, strict=True)},
                    },
                }
            ],
        }
    )
    override: dict[str, Any] = {"rates": {c: as_text(m, 6) for c, m in given_std.items()}}
    given_long_table = None
    if given_long is not None:
        given_long_table = {
            c: m for c, m in zip(CATEGORIES_ORACLE, given_long, strict=True) if c in given_std
        }
        override["long_context"] = {"rates": {c: as_text(m, 6) for c, m in given_long_table.items()}}
    plan = parse_plan_document({"adjust_percent": as_text(percent, 4), "models": {"m": override}})
    tier_given = given_std if given_long_table is None else given_long_table
    expected_std = {
        c: given_std[c] if c in given_std else oracle_rate(m, percent)
        for c, m in zip(CATEGORIES_ORACLE, std, strict=True)
    }
    expected_long = {
        c: tier_given[c] if c in tier_given else oracle_rate(m, percent)
        for c, m in zip(CATEGORIES_ORACLE, long, strict=True)
    }
    omitted = [
        oracle_rate(m, percent)
        for table, listed in ((given_std, std), (tier_given, long))
        for c, m in zip(CATEGORIES_ORACLE, listed, strict=True)
        if c not in table
    ]
    if omitted and max(omitted) > 10**12:
        with pytest.raises(PlanRateTooHigh):
            materialise(plan, doc)
        return
    (price,) = materialise(plan, doc)
    assert price.long_context is not None
    assert {c: Fraction(r) for c, r in price.rates.items()} == {
        c: Fraction(m, 10**6) for c, m in expected_std.items()
    }
    assert {c: Fraction(r) for c, r in price.long_context.rates.items()} == {
        c: Fraction(m, 10**6) for c, m in expected_long.items()
    }


@pytest.mark.parametrize(
    "raw",
    [
        {"adjust_percent": None},
        {"models": None},
        {"models": {"gpt-5": {"adjust_percent": None}}},
        {"models": {"gpt-5": {"rates": None}}},
        {"models": {"gpt-5": {"rates": {"input": "1", "output": "2"}, "long_context": None}}},
    ],
)
def test_an_explicit_null_is_refused_not_taken_for_absent(raw: dict[str, Any]) -> None:
    with pytest.raises(PriceDocumentInvalid):
        parse_plan_document(raw)


def test_the_documented_percent_pattern_is_the_parser_s_rule() -> None:
    import re

    from ledger.openapi.shapes import Percent

    pattern = re.compile(Percent.__metadata__[0].pattern)
    for text in ("-100", "-100.0000", "-99.9999", "0", "-0", "12.5", "100", "999.9999", "1000", "1000.0"):
        assert pattern.fullmatch(text), text
        parse_plan_document({"adjust_percent": text})
    for text in ("-100.0001", "1000.0001", "1001", "01", "1.00001", "+5", "1e2", " 1"):
        assert not pattern.fullmatch(text), text
        with pytest.raises(PriceDocumentInvalid):
            parse_plan_document({"adjust_percent": text})
