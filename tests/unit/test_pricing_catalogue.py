"""A model's catalogue fields: validation, the canonical form and hash, reservation sizing, retirement."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from pricing.catalogue import check_not_retired, is_retired, notice_of
from pricing.document import content_hash, document_to_builtins, parse_price_document
from pricing.engine import check_usage_limits, size_reservation
from pricing.errors import ModelLimitExceeded, ModelRetired, PriceDocumentInvalid
from pricing.examples import contract_price_document
from pricing.tokens import MAX_COMPLETIONS
from pricing.usage import Usage

# The contract's example document's content hash, computed by the code before catalogue
# fields existed: it must never move, or every stored version's hash would.
CONTRACT_HASH = "078787253736ca62115fb2fec2cea952ad09ed3d5f1d51a031306401843c7c6d"


def _with(**fields: Any) -> dict[str, Any]:
    raw = contract_price_document()
    raw["models"][1].update(fields)  # claude-sonnet-4-6: max output 128000
    return raw


def test_a_document_without_the_fields_is_unchanged() -> None:
    raw = contract_price_document()
    doc = parse_price_document(raw)
    price = doc.model("claude-sonnet-4-6")
    assert (price.default_output_tokens, price.max_n, price.retires_at) == (None, None, None)
    canonical = document_to_builtins(doc)
    for model in canonical["models"]:
        assert not {"default_output_tokens", "max_n", "retires_at"} & set(model)
    # the canonical form of the contract's document, byte for byte as before the fields existed
    assert json.dumps(canonical["models"][1], sort_keys=True) == json.dumps(
        {
            "model": "claude-sonnet-4-6",
            "max_input_tokens": 1000000,
            "max_output_tokens": 128000,
            "rates": {
                "input": "3",
                "cached_input": "0.3",
                "cache_write_5m": "3.75",
                "cache_write_1h": "6",
                "output": "15",
            },
        },
        sort_keys=True,
    )
    # null is absent: the same content, the same hash
    nulls = _with(default_output_tokens=None, max_n=None, retires_at=None)
    assert content_hash(parse_price_document(nulls)) == content_hash(doc)


def test_the_hash_of_a_document_without_the_fields_is_the_one_published_before() -> None:
    assert content_hash(parse_price_document(contract_price_document())) == CONTRACT_HASH


def test_the_fields_parse_round_trip_and_change_the_hash() -> None:
    raw = _with(default_output_tokens=1024, max_n=4, retires_at="2027-04-01T02:00:00+02:00")
    doc = parse_price_document(raw)
    price = doc.model("claude-sonnet-4-6")
    assert (price.default_output_tokens, price.max_n) == (1024, 4)
    assert price.retires_at == datetime(2027, 4, 1, tzinfo=UTC)
    canonical = document_to_builtins(doc)["models"][1]
    assert (canonical["default_output_tokens"], canonical["max_n"], canonical["retires_at"]) == (
        1024,
        4,
        "2027-04-01T00:00:00Z",
    )
    assert parse_price_document(document_to_builtins(doc)) == doc
    assert parse_price_document(document_to_builtins(doc), stored=True) == doc
    assert content_hash(doc) != content_hash(parse_price_document(contract_price_document()))
    for field, other in (
        ("default_output_tokens", 1000),
        ("max_n", 3),
        ("retires_at", "2027-04-02T00:00:00Z"),
    ):
        changed = _with(default_output_tokens=1024, max_n=4, retires_at="2027-04-01T00:00:00Z")
        changed["models"][1][field] = other
        assert content_hash(parse_price_document(changed)) != content_hash(doc), field


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("default_output_tokens", 0, "at least 1"),
        ("default_output_tokens", -5, "at least 1"),
        ("default_output_tokens", 1.0, "integer"),
        ("default_output_tokens", True, "boolean"),
        ("default_output_tokens", "1024", "integer"),
        ("default_output_tokens", 128001, "must not exceed the model's max_output_tokens (128000)"),
        ("max_n", 0, "at least 1"),
        ("max_n", 2.0, "integer"),
        ("max_n", False, "boolean"),
        ("max_n", "4", "integer"),
        ("max_n", MAX_COMPLETIONS + 1, f"at most {MAX_COMPLETIONS}"),
        ("retires_at", "2027-04-01T00:00:00", "timezone"),
        ("retires_at", "April 1st", "ISO-8601"),
        ("retires_at", 1806883200, "timestamp string"),
        ("retires_at", True, "timestamp string"),
    ],
)
def test_each_bad_field_is_refused_naming_it(field: str, value: object, why: str) -> None:
    with pytest.raises(PriceDocumentInvalid) as info:
        parse_price_document(_with(**{field: value}))
    assert info.value.param == f"models[1].{field}"
    assert why in info.value.detail
    assert info.value.message.startswith(f"models[1].{field}: ")


def test_a_misspelt_catalogue_field_is_refused() -> None:
    with pytest.raises(PriceDocumentInvalid) as info:
        parse_price_document(_with(max_completions=4))
    assert info.value.param == "models[1].max_completions"
    assert "max_n" in info.value.detail  # the list of known fields names the new ones


def test_default_output_tokens_equal_to_the_maximum_and_max_n_at_the_bound_are_accepted() -> None:
    price = parse_price_document(_with(default_output_tokens=128000, max_n=MAX_COMPLETIONS)).model(
        "claude-sonnet-4-6"
    )
    assert (price.default_output_tokens, price.max_n) == (128000, MAX_COMPLETIONS)


def _price(**fields: Any) -> Any:
    return parse_price_document(_with(**fields)).model("claude-sonnet-4-6")


def test_an_omitted_output_limit_reserves_the_default_not_the_maximum() -> None:
    # claude-sonnet-4-6: A = 1,000,000 at 6 (the 1h cache write), output 15.
    plain = size_reservation(_price(), max_input_tokens=None, max_output_tokens=None, n=None)
    assert (plain.output_allowance, plain.amount) == (128000, Decimal("7.92"))  # 6 + 128000 x 15 / 1e6
    sized = size_reservation(
        _price(default_output_tokens=1024), max_input_tokens=None, max_output_tokens=None, n=2
    )
    # 1,000,000 x 6 / 1e6 + 1,024 x 2 x 15 / 1e6 = 6 + 0.03072
    assert (sized.output_allowance, sized.n, sized.amount) == (1024, 2, Decimal("6.03072"))
    # a request's own limit still wins, above the default too, up to the maximum
    asked = size_reservation(
        _price(default_output_tokens=1024), max_input_tokens=10, max_output_tokens=4096, n=None
    )
    assert (asked.output_allowance, asked.amount) == (4096, Decimal("0.06150"))  # 10 x 6 + 4096 x 15, / 1e6
    with pytest.raises(ModelLimitExceeded) as info:
        size_reservation(
            _price(default_output_tokens=1024), max_input_tokens=None, max_output_tokens=128001, n=None
        )
    assert info.value.param == "max_output_tokens"


def test_n_above_max_n_is_refused_and_at_max_n_reserves_n_times() -> None:
    price = _price(max_n=4)
    four = size_reservation(price, max_input_tokens=10, max_output_tokens=100, n=4)
    assert (four.n, four.amount) == (4, Decimal("0.00606"))  # 10 x 6 / 1e6 + 100 x 4 x 15 / 1e6
    with pytest.raises(ModelLimitExceeded) as info:
        size_reservation(price, max_input_tokens=10, max_output_tokens=100, n=5)
    assert info.value.param == "n"
    assert "5 is above the model's limit of 4 completions" in info.value.detail
    one = _price(max_n=1)
    with pytest.raises(ModelLimitExceeded) as single:
        size_reservation(one, max_input_tokens=None, max_output_tokens=None, n=2)
    assert "limit of 1 completion per request" in single.value.detail
    # without max_n, the global bound alone applies
    assert size_reservation(_price(), max_input_tokens=10, max_output_tokens=1, n=128).n == 128


def test_usage_is_bounded_by_the_hold_s_own_n() -> None:
    price = _price(max_n=4, default_output_tokens=1024)
    check_usage_limits(price, Usage.from_counts(10, 2 * 128000), n=2)  # the model's max, not the default
    with pytest.raises(ModelLimitExceeded) as info:
        check_usage_limits(price, Usage.from_counts(10, 2 * 128000 + 1), n=2)
    assert info.value.param == "usage.completion_tokens"


def test_retirement_is_judged_at_the_time_given() -> None:
    when = datetime(2027, 4, 1, tzinfo=UTC)
    price = _price(retires_at="2027-04-01T00:00:00Z")
    before = when - timedelta(microseconds=1)
    assert not is_retired(price, before) and is_retired(price, when)
    check_not_retired(price, before)
    with pytest.raises(ModelRetired) as info:
        check_not_retired(price, when)
    assert (info.value.model, info.value.retires_at) == ("claude-sonnet-4-6", when)
    assert notice_of(price, before) == {
        "code": "model_retiring",
        "message": "claude-sonnet-4-6 retires at 2027-04-01T00:00:00Z; "
        "requests for it are refused from then on",
        "retires_at": "2027-04-01T00:00:00Z",
    }
    after = notice_of(price, when)
    assert after is not None and after["code"] == "model_retired"
    assert notice_of(_price(), when) is None
    check_not_retired(_price(), datetime(9999, 1, 1, tzinfo=UTC))
