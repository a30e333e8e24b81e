"""Diffs between price documents, and which rate changes are excessive."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from pricing.diff import (
    LimitChange,
    RateChange,
    RetirementChange,
    compare_documents,
    diff_documents,
    diff_limits,
    diff_to_builtins,
    excessive_changes,
)
from pricing.document import PriceDocument, parse_price_document
from pricing.examples import contract_price_document


def _doc(raw: dict[str, Any]) -> PriceDocument:
    return parse_price_document(raw)


OLD = _doc(contract_price_document())


def test_identical_documents_have_no_diff() -> None:
    same = contract_price_document()
    same["effective_at"] = "2027-01-01T00:00:00Z"
    same["models"][0]["rates"]["input"] = "2.50"
    diff = compare_documents(OLD, _doc(same))
    assert diff.empty
    assert diff_documents(OLD, _doc(same)) == []


def test_rate_changes_appearing_and_disappearing() -> None:
    raw = contract_price_document()
    raw["models"][0]["rates"]["output"] = "16"
    raw["models"][0]["long_context"]["rates"]["output"] = "24"
    raw["models"][1]["rates"]["cache_write"] = "3.75"
    del raw["models"][1]["rates"]["cache_write_1h"]
    assert diff_documents(OLD, _doc(raw)) == [
        RateChange("gpt-6-luna", "standard", "output", Decimal(15), Decimal(16)),
        RateChange("gpt-6-luna", "long_context", "output", Decimal("22.5"), Decimal(24)),
        RateChange("claude-sonnet-4-6", "standard", "cache_write", None, Decimal("3.75")),
        RateChange("claude-sonnet-4-6", "standard", "cache_write_1h", Decimal(6), None),
    ]


def test_added_and_removed_models_and_limits() -> None:
    raw = contract_price_document()
    raw["models"][0]["max_output_tokens"] = 64000
    raw["models"][0]["long_context"]["above_input_tokens"] = 200000
    raw["models"][1]["model"] = "claude-opus-4-8"
    new = _doc(raw)
    diff = compare_documents(OLD, new)
    assert diff.added_models == ("claude-opus-4-8",)
    assert diff.removed_models == ("claude-sonnet-4-6",)
    assert diff.limits == (
        LimitChange("gpt-6-luna", "max_output_tokens", 128000, 64000),
        LimitChange("gpt-6-luna", "above_input_tokens", 272000, 200000),
    )
    assert diff_limits(OLD, new) == list(diff.limits)
    removed = [c for c in diff.rates if c.model == "claude-sonnet-4-6"]
    added = [c for c in diff.rates if c.model == "claude-opus-4-8"]
    assert [c.category for c in removed] == [
        "input",
        "cached_input",
        "cache_write_5m",
        "cache_write_1h",
        "output",
    ]
    assert all(c.new is None for c in removed) and all(c.old is None for c in added)
    out = diff_to_builtins(diff)
    assert out["limits"][0] == {
        "model": "gpt-6-luna",
        "limit": "max_output_tokens",
        "old": 128000,
        "new": 64000,
    }
    assert {
        "model": "claude-sonnet-4-6",
        "table": "standard",
        "category": "cache_write_1h",
        "old": "6",
        "new": None,
    } in (out["rates"])


def test_long_context_table_removed_is_reported() -> None:
    raw = contract_price_document()
    del raw["models"][0]["long_context"]
    diff = compare_documents(OLD, _doc(raw))
    assert [(c.table, c.category, c.new) for c in diff.rates] == [
        ("long_context", "input", None),
        ("long_context", "cached_input", None),
        ("long_context", "cache_write", None),
        ("long_context", "output", None),
    ]
    assert diff.limits == (LimitChange("gpt-6-luna", "above_input_tokens", 272000, None),)


def _repriced(path: tuple[int, str, str], value: str) -> PriceDocument:
    raw = contract_price_document()
    model, table, category = path
    node = raw["models"][model] if table == "standard" else raw["models"][model]["long_context"]
    node["rates"][category] = value
    return _doc(raw)


@pytest.mark.parametrize(
    ("category", "value", "excessive"),
    [
        ("output", "45", False),  # exactly 3x up: not more than the factor
        ("output", "45.000001", True),  # just above 3x up
        ("output", "5", False),  # exactly 3x down
        ("output", "4.999999", True),  # just below a third
        ("cached_input", "0", True),  # 0.25 -> 0: an infinite cut counts
        ("input", "2.6", False),
    ],
)
def test_excessive_changes_at_the_factor(category: str, value: str, excessive: bool) -> None:
    new = _repriced((0, "standard", category), value)
    found = excessive_changes(OLD, new, Decimal(3))
    assert [c.category for c in found] == ([category] if excessive else [])


def test_zero_to_positive_and_appearing_rates_are_not_excessive() -> None:
    raw = contract_price_document()
    raw["models"][0]["rates"]["cached_input"] = "0"
    free_reads = _doc(raw)
    assert excessive_changes(free_reads, OLD, Decimal(3)) == []
    raw = contract_price_document()
    raw["models"][1]["rates"]["cache_write"] = "1000"
    assert excessive_changes(OLD, _doc(raw), Decimal(3)) == []


def test_long_context_rates_are_judged_too() -> None:
    new = _repriced((0, "long_context", "input"), "50")
    assert excessive_changes(OLD, new, Decimal(3)) == [
        RateChange("gpt-6-luna", "long_context", "input", Decimal(5), Decimal(50))
    ]


def test_factor_must_be_at_least_one() -> None:
    with pytest.raises(ValueError):
        excessive_changes(OLD, OLD, Decimal("0.5"))


def test_catalogue_fields_are_limit_and_retirement_changes() -> None:
    raw = contract_price_document()
    raw["models"][0]["max_n"] = 4
    raw["models"][1]["default_output_tokens"] = 1024
    raw["models"][1]["retires_at"] = "2027-04-01T00:00:00Z"
    new = _doc(raw)
    diff = compare_documents(OLD, new)
    assert not diff.empty and diff.rates == ()
    assert diff.limits == (
        LimitChange("gpt-6-luna", "max_n", None, 4),
        LimitChange("claude-sonnet-4-6", "default_output_tokens", None, 1024),
    )
    assert diff.retirements == (
        RetirementChange("claude-sonnet-4-6", None, datetime(2027, 4, 1, tzinfo=UTC)),
    )
    out = diff_to_builtins(diff)
    assert out["retirements"] == [{"model": "claude-sonnet-4-6", "old": None, "new": "2027-04-01T00:00:00Z"}]
    assert {"model": "gpt-6-luna", "limit": "max_n", "old": None, "new": 4} in out["limits"]
    # moved, then withdrawn: each is a change; the same fields again are none
    later = dict(raw, models=[dict(m) for m in raw["models"]])
    later["models"][1]["retires_at"] = "2027-05-01T00:00:00Z"
    moved = compare_documents(new, _doc(later)).retirements
    assert moved == (
        RetirementChange(
            "claude-sonnet-4-6", datetime(2027, 4, 1, tzinfo=UTC), datetime(2027, 5, 1, tzinfo=UTC)
        ),
    )
    assert compare_documents(new, OLD).retirements == (
        RetirementChange("claude-sonnet-4-6", datetime(2027, 4, 1, tzinfo=UTC), None),
    )
    assert compare_documents(new, _doc(raw)).empty
