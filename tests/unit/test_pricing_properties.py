"""Properties of the pricing rules over generated price tables and usages (Hypothesis)."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pricing.document import ModelPrice, content_hash, document_to_builtins, parse_price_document
from pricing.engine import (
    LINE_CATEGORIES,
    Charge,
    charge_to_builtins,
    compute_charge,
    reservation_to_builtins,
    size_reservation,
)
from pricing.money import format_amount
from pricing.usage import Usage, parse_usage, usage_grows_from

PLAIN = re.compile(r"^-?\d+(\.\d+)?$")
OPTIONAL = ("cached_input", "cache_write", "cache_write_5m", "cache_write_1h")
# Rates with up to 6 decimal places, from 0 up to 1000 per 1M tokens.
RATE = st.integers(0, 10**9).map(lambda micros: Decimal(micros).scaleb(-6))
FAST = settings(max_examples=200, deadline=None, database=None)


@st.composite
def rate_tables(draw: st.DrawFn, categories: tuple[str, ...] | None = None) -> dict[str, str]:
    if categories is None:
        categories = ("input", "output", *(c for c in OPTIONAL if draw(st.booleans())))
    return {category: format_amount(draw(RATE)) for category in categories}


@st.composite
def model_prices(draw: st.DrawFn) -> ModelPrice:
    max_input = draw(st.integers(1, 2_000_000))
    model: dict[str, Any] = {
        "model": "m",
        "max_input_tokens": max_input,
        "max_output_tokens": draw(st.integers(1, 200_000)),
        "rates": draw(rate_tables()),
    }
    if max_input > 1 and draw(st.booleans()):
        model["long_context"] = {
            "above_input_tokens": draw(st.integers(1, max_input - 1)),
            "rates": draw(rate_tables(tuple(model["rates"]))),
        }
    return parse_price_document({"currency": "USD", "models": [model]}).model("m")


# The six billed quantities: uncached input, R, W5, W1, W - W5 - W1, C.
Parts = tuple[int, int, int, int, int, int]
PARTS = st.tuples(*(st.integers(0, 400_000) for _ in range(6)))


def usage_of(parts: Parts, *, reasoning: int = 0, explicit_w: bool = True) -> Usage:
    uncached, reads, w5, w1, other, completion = parts
    written = w5 + w1 + other
    usage = Usage.from_counts(
        uncached + reads + written,
        completion,
        cached_tokens=reads,
        cache_write_tokens=written if (explicit_w or other) else None,
        cache_write_5m=w5,
        cache_write_1h=w1,
        reasoning_tokens=min(reasoning, completion),
    )
    assert parse_usage(usage.raw) == usage
    return usage


@FAST
@given(model_prices(), PARTS, st.integers(0, 400_000), st.booleans())
def test_lines_sum_exactly_to_the_charge(
    price: ModelPrice, parts: Parts, reasoning: int, explicit_w: bool
) -> None:
    usage = usage_of(parts, reasoning=reasoning, explicit_w=explicit_w)
    charge = compute_charge(price, usage)
    assert sum((line.amount for line in charge.lines), Decimal(0)) == charge.amount
    categories = [line.category for line in charge.lines]
    assert categories == [c for c in LINE_CATEGORIES if c in categories]
    assert all(line.tokens > 0 for line in charge.lines)
    assert sum(line.tokens for line in charge.lines) == usage.prompt_tokens + usage.completion_tokens
    for line in charge.lines:
        assert line.amount * 1_000_000 == line.tokens * line.rate
    expected_tier = (
        "long_context"
        if price.long_context is not None and usage.prompt_tokens > price.long_context.above_input_tokens
        else "standard"
    )
    assert charge.tier == expected_tier


@FAST
@given(model_prices(), PARTS, st.integers(0, 5), st.integers(1, 100_000))
def test_charge_never_decreases_when_a_count_grows_within_a_tier(
    price: ModelPrice, parts: Parts, which: int, extra: int
) -> None:
    grown = list(parts)
    grown[which] += extra
    before, after = usage_of(parts), usage_of((grown[0], grown[1], grown[2], grown[3], grown[4], grown[5]))
    old_charge, new_charge = compute_charge(price, before), compute_charge(price, after)
    assume(old_charge.tier == new_charge.tier)
    assert new_charge.amount >= old_charge.amount
    assert usage_grows_from(before, after) is None


@FAST
@given(model_prices(), PARTS, st.integers(0, 400_000))
def test_reasoning_tokens_never_change_the_charge(price: ModelPrice, parts: Parts, reasoning: int) -> None:
    assert compute_charge(price, usage_of(parts)) == compute_charge(
        price, usage_of(parts, reasoning=reasoning)
    )


@st.composite
def reservation_and_usage(draw: st.DrawFn) -> tuple[ModelPrice, dict[str, Any], Usage]:
    price = draw(model_prices())
    fields = {
        "max_input_tokens": draw(st.none() | st.integers(1, 2 * price.max_input_tokens)),
        "max_output_tokens": draw(st.none() | st.integers(1, price.max_output_tokens)),
        "n": draw(st.none() | st.integers(1, 4)),
    }
    a = (
        price.max_input_tokens
        if fields["max_input_tokens"] is None
        else min(price.max_input_tokens, fields["max_input_tokens"])
    )
    o = price.max_output_tokens if fields["max_output_tokens"] is None else fields["max_output_tokens"]
    n = fields["n"] or 1
    prompt = draw(st.integers(0, a))
    reads = draw(st.integers(0, prompt))
    written = draw(st.integers(0, prompt - reads))
    w5 = draw(st.integers(0, written))
    w1 = draw(st.integers(0, written - w5))
    usage = Usage.from_counts(
        prompt,
        draw(st.integers(0, o * n)),
        cached_tokens=reads,
        cache_write_tokens=written,
        cache_write_5m=w5,
        cache_write_1h=w1,
    )
    return price, fields, usage


@FAST
@given(reservation_and_usage())
def test_reservation_covers_any_charge_within_its_allowances(
    case: tuple[ModelPrice, dict[str, Any], Usage],
) -> None:
    price, fields, usage = case
    reservation = size_reservation(price, **fields)
    assert usage.prompt_tokens <= reservation.input_allowance
    assert usage.completion_tokens <= reservation.output_allowance * reservation.n
    assert compute_charge(price, usage).amount <= reservation.amount


def _walk(value: object) -> list[object]:
    if isinstance(value, dict):
        return [value, *(x for item in value.values() for x in _walk(item))]
    if isinstance(value, list):
        return [value, *(x for item in value for x in _walk(item))]
    return [value]


def _assert_plain_amount(text: object, exact: Decimal) -> None:
    assert isinstance(text, str)
    assert PLAIN.match(text), text
    assert Decimal(text) == exact


@FAST
@given(model_prices(), PARTS, st.none() | st.integers(1, 10_000_000), st.none() | st.integers(1, 4))
def test_builtins_hold_no_float_and_round_trip_exactly(
    price: ModelPrice, parts: Parts, max_input: int | None, n: int | None
) -> None:
    charge: Charge = compute_charge(price, usage_of(parts))
    out = charge_to_builtins(charge)
    reservation = size_reservation(price, max_input_tokens=max_input, max_output_tokens=None, n=n)
    held = reservation_to_builtins(reservation)
    for value in _walk(out) + _walk(held):
        assert isinstance(value, dict | list | str | int) and not isinstance(value, bool | float)
    json.dumps(out)
    json.dumps(held)
    _assert_plain_amount(out["amount"], charge.amount)
    for line, wire in zip(charge.lines, out["lines"], strict=True):
        _assert_plain_amount(wire["rate"], line.rate)
        _assert_plain_amount(wire["amount"], line.amount)
        assert wire["tokens"] == line.tokens
    _assert_plain_amount(held["amount"], reservation.amount)
    _assert_plain_amount(held["input_rate"], reservation.input_rate)
    _assert_plain_amount(held["output_rate"], reservation.output_rate)


@FAST
@given(model_prices())
def test_documents_round_trip_through_their_canonical_form(price: ModelPrice) -> None:
    doc = parse_price_document(
        {
            "currency": "USD",
            "effective_at": "2026-12-01T00:00:00Z",
            "models": [
                document_to_builtins(
                    parse_price_document(
                        {
                            "currency": "USD",
                            "models": [
                                {
                                    "model": price.model,
                                    "max_input_tokens": price.max_input_tokens,
                                    "max_output_tokens": price.max_output_tokens,
                                    "rates": {c: format_amount(r) for c, r in price.rates.items()},
                                }
                            ],
                        }
                    )
                )["models"][0]
            ],
        }
    )
    again = parse_price_document(json.dumps(document_to_builtins(doc)))
    assert again == doc
    assert content_hash(again) == content_hash(doc)
