"""The one CSV writer: which cells get an apostrophe, and that numbers never do."""

from __future__ import annotations

import csv
import io

import pytest

from ledger.reports.csv_writer import CsvLayout, neutralise
from ledger.reports.schemas import RevenueGroup, RevenueReport
from ledger.reports.service import revenue_csv


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        ("=1+1", "'=1+1"),
        (" =1+1", "' =1+1"),
        ("\n=cmd", "'\n=cmd"),
        ("\r\n@x", "'\r\n@x"),
        ("\t@x", "'\t@x"),
        ("\tplain", "'\tplain"),
        ("\u00a0+1", "'\u00a0+1"),
        ("+1", "'+1"),
        ("-2", "'-2"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("plain", "plain"),
        ("a=b", "a=b"),
        ("  spaced", "  spaced"),
        ("", ""),
    ],
)
def test_text_cells(text: str, cell: str) -> None:
    assert neutralise(text) == cell


def test_numeric_columns_keep_plain_decimals_and_neutralise_anything_else() -> None:
    layout = CsvLayout(("label", "amount"), numeric=("amount",))
    text = layout.header() + layout.lines([["-1", "-1.5"], ["x", "-2+3"], ["y", " =1"], ["z", None]])
    assert list(csv.reader(io.StringIO(text))) == [
        ["label", "amount"],
        ["'-1", "-1.5"],
        ["x", "'-2+3"],
        ["y", "' =1"],
        ["z", ""],
    ]
    with pytest.raises(ValueError):
        layout.lines([["only one cell"]])
    with pytest.raises(ValueError):
        CsvLayout(("a",), numeric=("b",))


def test_revenue_keys_are_text_and_amounts_stay_numbers() -> None:
    report = RevenueReport(
        currency="USD",
        group_by="model",
        start=None,
        end="2026-12-01T00:00:00Z",
        total="0.0001",
        groups=[
            RevenueGroup(key=" =1+1", amount="0.0004", settles=2, true_ups=0),
            RevenueGroup(key="-2", amount="-0.0003", settles=0, true_ups=1),
            RevenueGroup(key="gpt-5", amount="0", settles=1, true_ups=0),
        ],
    )
    assert list(csv.reader(io.StringIO(revenue_csv(report)))) == [
        ["key", "amount", "settles", "true_ups"],
        ["' =1+1", "0.0004", "2", "0"],
        ["'-2", "-0.0003", "0", "1"],
        ["gpt-5", "0", "1", "0"],
        ["total", "0.0001", "", ""],
    ]
