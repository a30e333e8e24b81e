"""Price documents: what is accepted, what is refused (and which `param` says so), the canonical form."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from pricing.document import (
    MODEL_NAME_PATTERN,
    ModelPrice,
    Rates,
    content_hash,
    document_to_builtins,
    parse_price_document,
)
from pricing.errors import ModelNotPriced, PriceDocumentInvalid
from pricing.examples import contract_price_document

Doc = dict[str, Any]


def test_contract_example_parses_exactly() -> None:
    doc = parse_price_document(contract_price_document())
    assert doc.currency == "USD"
    assert doc.effective_at == datetime(2026, 12, 1, tzinfo=UTC)
    assert doc.model_names() == ("gpt-6-luna", "claude-sonnet-4-6")
    luna = doc.model("gpt-6-luna")
    assert luna.max_input_tokens == 1050000
    assert luna.max_output_tokens == 128000
    assert luna.rates == Rates(
        input=Decimal("2.5"), cached_input=Decimal("0.25"), cache_write=Decimal("2.5"), output=Decimal(15)
    )
    assert luna.long_context is not None
    assert luna.long_context.above_input_tokens == 272000
    assert luna.long_context.rates.output == Decimal("22.5")
    sonnet = doc.model("claude-sonnet-4-6")
    assert sonnet.long_context is None
    assert sonnet.rates.categories() == (
        "input",
        "cached_input",
        "cache_write_5m",
        "cache_write_1h",
        "output",
    )
    assert sonnet.rates.cache_write is None
    assert sonnet.rates["cache_write_1h"] == Decimal(6)
    assert "cache_write" not in sonnet.rates
    assert sonnet.rates.get("cache_write") is None


def test_json_bytes_and_text_parse_like_builtins() -> None:
    raw = contract_price_document()
    expected = parse_price_document(raw)
    assert parse_price_document(json.dumps(raw)) == expected
    assert parse_price_document(json.dumps(raw).encode()) == expected


def test_unknown_model_is_model_not_priced() -> None:
    doc = parse_price_document(contract_price_document())
    with pytest.raises(ModelNotPriced) as info:
        doc.model("gpt-7")
    assert info.value.model == "gpt-7"
    assert isinstance(info.value, LookupError)


def test_effective_at_optional_and_normalised_to_utc() -> None:
    raw = contract_price_document()
    del raw["effective_at"]
    assert parse_price_document(raw).effective_at is None
    raw["effective_at"] = None
    assert parse_price_document(raw).effective_at is None
    raw["effective_at"] = "2026-12-01T02:00:00+02:00"
    assert parse_price_document(raw).effective_at == datetime(2026, 12, 1, tzinfo=UTC)


def test_source_is_optional() -> None:
    raw = contract_price_document()
    del raw["source"]
    assert parse_price_document(raw).source == ""


def test_zero_rate_and_six_places_accepted() -> None:
    raw = contract_price_document()
    raw["models"][1]["rates"]["cached_input"] = "0"
    raw["models"][1]["rates"]["input"] = "0.000001"
    sonnet = parse_price_document(raw).model("claude-sonnet-4-6")
    assert sonnet.rates.cached_input == Decimal(0)
    assert sonnet.rates.input == Decimal("0.000001")


def _set(path: str, value: object) -> Callable[[Doc], None]:
    """A mutation that sets a dotted path (list indices as numbers) in the document."""

    def mutate(doc: Doc) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return mutate


def _delete(path: str) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[last]

    return mutate


def _duplicate_model(doc: Doc) -> None:
    doc["models"][1]["model"] = "gpt-6-luna"


REFUSED: list[tuple[str, Callable[[Doc], None], str]] = [
    ("negative rate", _set("models.0.rates.input", "-1"), "models[0].rates.input"),
    ("non-numeric rate", _set("models.1.rates.output", "fifteen"), "models[1].rates.output"),
    ("JSON number rate", _set("models.0.rates.output", 15.5), "models[0].rates.output"),
    ("JSON integer rate", _set("models.0.rates.output", 15), "models[0].rates.output"),
    ("bool rate", _set("models.0.rates.output", True), "models[0].rates.output"),
    ("null rate", _set("models.0.rates.cached_input", None), "models[0].rates.cached_input"),
    (
        "seven decimal places",
        _set("models.1.rates.cached_input", "0.0000001"),
        "models[1].rates.cached_input",
    ),
    ("trailing zero 7th place", _set("models.1.rates.input", "3.0000000"), "models[1].rates.input"),
    ("exponent", _set("models.0.rates.input", "1e-3"), "models[0].rates.input"),
    ("NaN string", _set("models.0.rates.input", "NaN"), "models[0].rates.input"),
    ("whitespace in rate", _set("models.0.rates.input", " 2.5"), "models[0].rates.input"),
    ("absurd rate", _set("models.0.rates.input", "1000001"), "models[0].rates.input"),
    ("missing input", _delete("models.1.rates.input"), "models[1].rates.input"),
    ("missing output", _delete("models.0.rates.output"), "models[0].rates.output"),
    ("unknown rate category", _set("models.0.rates.cachedinput", "0.1"), "models[0].rates.cachedinput"),
    ("max_input_tokens zero", _set("models.0.max_input_tokens", 0), "models[0].max_input_tokens"),
    ("max_output_tokens negative", _set("models.1.max_output_tokens", -5), "models[1].max_output_tokens"),
    ("max_output_tokens float", _set("models.1.max_output_tokens", 128000.0), "models[1].max_output_tokens"),
    ("max_output_tokens bool", _set("models.1.max_output_tokens", True), "models[1].max_output_tokens"),
    ("max_output_tokens string", _set("models.1.max_output_tokens", "128000"), "models[1].max_output_tokens"),
    ("missing max_input_tokens", _delete("models.1.max_input_tokens"), "models[1].max_input_tokens"),
    (
        "above_input_tokens zero",
        _set("models.0.long_context.above_input_tokens", 0),
        "models[0].long_context.above_input_tokens",
    ),
    (
        "above_input_tokens at the model limit",
        _set("models.0.long_context.above_input_tokens", 1050000),
        "models[0].long_context.above_input_tokens",
    ),
    ("duplicate model", _duplicate_model, "models[1].model"),
    (
        "long_context missing a category",
        _delete("models.0.long_context.rates.cached_input"),
        "models[0].long_context.rates.cached_input",
    ),
    (
        "long_context extra category",
        _set("models.0.long_context.rates.cache_write_5m", "6"),
        "models[0].long_context.rates.cache_write_5m",
    ),
    (
        "long_context negative rate",
        _set("models.0.long_context.rates.output", "-22.5"),
        "models[0].long_context.rates.output",
    ),
    ("long_context unknown field", _set("models.0.long_context.above", 1), "models[0].long_context.above"),
    ("unknown top-level field", _set("currncy", "USD"), "currncy"),
    ("unknown model field", _set("models.1.max_output", 1), "models[1].max_output"),
    ("naive effective_at", _set("effective_at", "2026-12-01T00:00:00"), "effective_at"),
    ("date-only effective_at", _set("effective_at", "2026-12-01"), "effective_at"),
    ("garbage effective_at", _set("effective_at", "tomorrow"), "effective_at"),
    ("lower-case currency", _set("currency", "usd"), "currency"),
    ("missing currency", _delete("currency"), "currency"),
    ("no models", _set("models", []), "models"),
    ("models not a list", _set("models", {}), "models"),
    ("model not an object", _set("models.1", "claude"), "models[1]"),
    ("empty model name", _set("models.1.model", ""), "models[1].model"),
    ("padded model name", _set("models.1.model", " claude-sonnet-4-6"), "models[1].model"),
    ("source not a string", _set("source", 7), "source"),
]


@pytest.mark.parametrize(("mutate", "param"), [(m, p) for _, m, p in REFUSED], ids=[n for n, _, _ in REFUSED])
def test_refused_documents_name_the_field(mutate: Callable[[Doc], None], param: str) -> None:
    raw = contract_price_document()
    mutate(raw)
    with pytest.raises(PriceDocumentInvalid) as info:
        parse_price_document(raw)
    assert info.value.param == param
    assert info.value.message
    # The same document as JSON text is refused at the same field.
    with pytest.raises(PriceDocumentInvalid) as again:
        parse_price_document(json.dumps(raw))
    assert again.value.param == param


def test_naive_datetime_object_refused() -> None:
    raw: dict[str, Any] = contract_price_document()
    raw["effective_at"] = datetime(2026, 12, 1)
    with pytest.raises(PriceDocumentInvalid) as info:
        parse_price_document(raw)
    assert info.value.param == "effective_at"


# A one-model document as JSON text: fill in the max_input_tokens member and the rates members.
_ONE_MODEL = '{"currency": "USD", "models": [{"model": "m", %s, "max_output_tokens": 5, "rates": {%s}}]}'


@pytest.mark.parametrize(
    ("text", "param"),
    [
        ("not json", ""),
        ("[1, 2]", ""),
        ('"USD"', ""),
        ('{"currency": "USD", "currency": "EUR", "models": []}', "currency"),
        (
            _ONE_MODEL % ('"max_input_tokens": 10', '"input": "1", "output": "2", "input": "0.1"'),
            "models[0].rates.input",
        ),
        (
            _ONE_MODEL % ('"max_input_tokens": 10', '"input": NaN, "output": "2"'),
            "",
        ),
        (
            _ONE_MODEL % ('"max_input_tokens": 1e6', '"input": "1", "output": "2"'),
            "models[0].max_input_tokens",
        ),
    ],
    ids=["not-json", "array", "string", "duplicate-key", "duplicate-rate-key", "nan", "exponent-limit"],
)
def test_refused_json_texts(text: str, param: str) -> None:
    with pytest.raises(PriceDocumentInvalid) as info:
        parse_price_document(text)
    assert info.value.param == param


def test_canonical_form_round_trips_with_plain_strings() -> None:
    raw = contract_price_document()
    raw["models"][1]["rates"]["input"] = "3.000"
    doc = parse_price_document(raw)
    out = document_to_builtins(doc)
    assert out["effective_at"] == "2026-12-01T00:00:00Z"
    assert out["models"][1]["rates"] == {
        "input": "3",
        "cached_input": "0.3",
        "cache_write_5m": "3.75",
        "cache_write_1h": "6",
        "output": "15",
    }
    assert out["models"][0]["long_context"] == {
        "above_input_tokens": 272000,
        "rates": {"input": "5", "cached_input": "0.5", "cache_write": "5", "output": "22.5"},
    }
    assert "long_context" not in out["models"][1]
    assert parse_price_document(json.dumps(out)) == doc


def test_content_hash_ignores_effective_at_order_and_spelling() -> None:
    raw = contract_price_document()
    base = content_hash(parse_price_document(raw))
    assert len(base) == 64 and int(base, 16) >= 0

    later = contract_price_document()
    later["effective_at"] = "2027-01-01T00:00:00Z"
    assert content_hash(parse_price_document(later)) == base

    reordered = contract_price_document()
    reordered["models"].reverse()
    assert content_hash(parse_price_document(reordered)) == base

    respelt = contract_price_document()
    respelt["models"][0]["rates"]["input"] = "2.50"
    assert content_hash(parse_price_document(respelt)) == base

    repriced = contract_price_document()
    repriced["models"][0]["rates"]["input"] = "2.6"
    assert content_hash(parse_price_document(repriced)) != base


def test_model_price_without_long_context_defaults() -> None:
    price = ModelPrice(
        model="m", max_input_tokens=10, max_output_tokens=5, rates=Rates(input=Decimal(1), output=Decimal(2))
    )
    assert price.long_context is None
    assert price.rates.items() == (("input", Decimal(1)), ("output", Decimal(2)))


@pytest.mark.parametrize(
    "name",
    [
        '=HYPERLINK("http://x")',
        "+1",
        "-2",
        "@cmd",
        "_private",
        ".hidden",
        "/path",
        "gpt 5",
        "gpt\t5",
        "gpt\n5",
        "a,b",
        'a"b',
        "a=b;c",
        "mödel",
        "m" * 129,
    ],
)
def test_model_names_outside_the_safe_set_are_refused(name: str) -> None:
    raw = contract_price_document()
    raw["models"][1]["model"] = name
    with pytest.raises(PriceDocumentInvalid) as info:
        parse_price_document(raw)
    assert info.value.param == "models[1].model"


def test_real_names_pass_and_a_stored_document_keeps_the_names_it_was_published_with() -> None:
    """A version published before the name rule stays readable: holds pinned to it still settle."""
    for name in ("a", "7b", "gpt-5.1", "claude-sonnet-4-6", "org/model:v1@2026+beta_x", "M" * 128):
        raw = contract_price_document()
        raw["models"][1]["model"] = name
        assert parse_price_document(raw).model_names()[1] == name
        assert re.fullmatch(MODEL_NAME_PATTERN, name)  # the OpenAPI pattern says the same
    raw = contract_price_document()
    raw["models"][1]["model"] = "=legacy name"
    assert parse_price_document(raw, stored=True).model_names()[1] == "=legacy name"
    raw["models"][1]["model"] = " padded"
    with pytest.raises(PriceDocumentInvalid):
        parse_price_document(raw, stored=True)
