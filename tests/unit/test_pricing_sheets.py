"""The bundled price sheets load, hold only sourced models, and merge into one document."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from pricing.bundled import (
    SHEETS_DIR,
    UNPRICED_MODELS,
    bundled_document,
    bundled_sheet_paths,
    load_sheet,
    merge_documents,
)
from pricing.document import parse_price_document
from pricing.engine import compute_charge, size_reservation
from pricing.errors import PriceDocumentInvalid
from pricing.examples import contract_price_document
from pricing.usage import Usage

# The gateway catalog (seed 000) lists these models; each bundled model must be one of them.
CATALOG = {
    "claude-opus-4-8",
    "claude-sonnet-4-6",
    "gemini-3.5-flash",
    "gpt-5",
    "gpt-5-mini",
    "gpt-5.1",
    "gpt-6-astra",
    "gpt-6-luna",
    "gpt-6-sol",
}


def test_every_bundled_sheet_is_a_valid_document() -> None:
    paths = bundled_sheet_paths()
    assert [p.name for p in paths] == ["anthropic.json", "openai.json"]
    for path in paths:
        doc = load_sheet(path)
        assert doc.currency == "USD"
        assert doc.effective_at is None
        assert "2026-12-02" in doc.source
        assert set(doc.model_names()) <= CATALOG


def test_sheets_readme_names_every_bundled_and_left_out_model() -> None:
    readme = (SHEETS_DIR / "README.md").read_text()
    merged = bundled_document()
    for name in merged.model_names():
        assert f"| {name} |" in readme
    for name in CATALOG - set(merged.model_names()):
        assert f"| {name} |" in readme


def test_deliberately_unpriced_models_are_the_readmes_left_out_ones() -> None:
    """The ledger counts these as known (503, not 404): they must be exactly the catalog's
    models the sheets leave out, each listed in the README's "Left out" table."""
    left_out = (SHEETS_DIR / "README.md").read_text().split("## Left out", 1)[1]
    assert set(UNPRICED_MODELS) == CATALOG - set(bundled_document().model_names())
    for name in UNPRICED_MODELS:
        assert f"| {name} |" in left_out


@dataclass(frozen=True)
class Listed:
    model: str
    input: str
    output: str
    max_input: int
    max_output: int
    max_n: int
    retires_at: str | None = None


# The list prices and catalogue fields as recorded in pricing/sheets/README.md (max output and
# n per model as the gateway's model reference, seed 000, gives them), checked against the files.
LISTED = [
    Listed("gpt-5", "1.25", "10", 272000, 128000, 4),
    Listed("gpt-5-mini", "0.25", "2", 272000, 128000, 4),
    Listed("gpt-5.1", "1.25", "10", 272000, 128000, 4, "2027-04-01T00:00:00Z"),
    Listed("gpt-6-astra", "10", "50", 922000, 128000, 1),
    Listed("gpt-6-sol", "2", "10", 922000, 128000, 1),
    Listed("gpt-6-luna", "0.1", "0.5", 922000, 128000, 1),
    Listed("claude-opus-4-8", "5", "25", 1000000, 128000, 1),
    Listed("claude-sonnet-4-6", "3", "15", 1000000, 128000, 1),
]


@pytest.mark.parametrize("listed", LISTED, ids=[x.model for x in LISTED])
def test_bundled_prices_match_the_readme(listed: Listed) -> None:
    price = bundled_document().model(listed.model)
    assert price.rates.input == Decimal(listed.input)
    assert price.rates.output == Decimal(listed.output)
    assert (price.max_input_tokens, price.max_output_tokens) == (listed.max_input, listed.max_output)
    assert price.max_n == listed.max_n
    assert price.default_output_tokens is None  # the catalogue specifies no default output limit
    retires = None if price.retires_at is None else price.retires_at.isoformat().replace("+00:00", "Z")
    assert retires == listed.retires_at
    row = next(
        line
        for line in (SHEETS_DIR / "README.md").read_text().splitlines()
        if line.startswith(f"| {listed.model} |")
    )
    assert f"| {listed.max_n} | {listed.retires_at or '—'} |" in row


def test_gpt6_long_context_is_2x_input_and_cache_and_1_5x_output() -> None:
    for name in ("gpt-6-astra", "gpt-6-sol", "gpt-6-luna"):
        price = bundled_document().model(name)
        assert price.long_context is not None and price.long_context.above_input_tokens == 272000
        std, long = price.rates, price.long_context.rates
        assert long.categories() == std.categories()
        for category in ("input", "cached_input", "cache_write"):
            assert long[category] == 2 * std[category]
        assert long.output == std.output * Decimal("1.5")


def test_bundled_sol_charges_and_reserves_by_hand() -> None:
    sol = bundled_document().model("gpt-6-sol")
    # 272,001 prompt tokens (100,000 cached) and 1,000 output: long context.
    # 172,001 x 4 / 1e6 = 0.688004; 100,000 x 0.4 / 1e6 = 0.04; 1,000 x 15 / 1e6 = 0.015.
    charge = compute_charge(sol, Usage.from_counts(272001, 1000, cached_tokens=100000))
    assert (charge.tier, charge.amount) == ("long_context", Decimal("0.743004"))
    # 922,000 x 5 / 1e6 = 4.61; 128,000 x 15 / 1e6 = 1.92.
    reservation = size_reservation(sol, max_input_tokens=None, max_output_tokens=None, n=None)
    assert (reservation.input_rate, reservation.output_rate, reservation.amount) == (
        Decimal(5),
        Decimal(15),
        Decimal("6.53"),
    )


def test_merge_keeps_every_model_in_order() -> None:
    paths = bundled_sheet_paths()
    merged = merge_documents([load_sheet(p) for p in paths], source="all sheets")
    assert merged.source == "all sheets"
    assert merged.model_names() == tuple(n for p in paths for n in load_sheet(p).model_names())
    assert bundled_document().model_names() == merged.model_names()


def test_merge_refuses_a_model_priced_twice() -> None:
    contract = parse_price_document(contract_price_document())
    with pytest.raises(PriceDocumentInvalid) as info:
        merge_documents([bundled_document(), contract], source="x")
    # gpt-6-luna is models[5] of the bundled sheets; it comes again right after all 8 of them.
    assert info.value.param == "models[8].model"
    assert "gpt-6-luna" in info.value.message


def test_merge_refuses_mixed_currencies_and_nothing() -> None:
    raw = contract_price_document()
    raw["currency"] = "EUR"
    raw["models"] = raw["models"][1:]
    raw["models"][0]["model"] = "eur-model"
    with pytest.raises(PriceDocumentInvalid) as info:
        merge_documents([bundled_document(), parse_price_document(raw)], source="x")
    assert info.value.param == "currency"
    with pytest.raises(PriceDocumentInvalid) as empty:
        merge_documents([], source="x")
    assert empty.value.param == "models"


def test_load_sheet_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    raw = contract_price_document()
    raw["models"][0]["rates"]["input"] = 2.5
    bad.write_text(json.dumps(raw))
    with pytest.raises(PriceDocumentInvalid) as info:
        load_sheet(bad)
    assert info.value.param == "models[0].rates.input"
    assert info.value.message.startswith("models[0].rates.input: ")
    assert info.value.message.endswith("(in broken.json)")
