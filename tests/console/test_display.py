"""The console's reading rule for amounts and times (pure: no database)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ledger.console.display import hold_link, money, readable, utc


@pytest.mark.parametrize(
    ("exact", "shown"),
    [
        ("39.67", "39.67"),
        ("5", "5.00"),
        ("0", "0.00"),
        ("1234567.891", "1,234,567.89"),
        ("-12.345", "-12.35"),  # half away from zero
        ("0.01", "0.01"),
        ("0.009999", "0.009999"),
        ("0.000316", "0.000316"),
        ("0.00316949", "0.003169"),
        ("-0.00012345678", "-0.0001235"),
        ("0.000000000001", "0.000000000001"),
    ],
)
def test_amounts_round_to_cents_or_four_significant_digits(exact: str, shown: str) -> None:
    assert readable(Decimal(exact)) == shown


def test_the_exact_value_stays_in_the_title_and_rounded_values_are_marked() -> None:
    assert str(money("10.000000000001", "USD")) == (
        '<span class="amount rounded" title="10.000000000001 USD">10.00 USD</span>'
    )
    assert str(money("2.5")) == '<span class="amount" title="2.5">2.50</span>'
    assert str(money(None)) == ""


def test_times_are_utc_to_the_second_and_hold_links_show_the_distinct_tail() -> None:
    assert utc("2026-12-07T10:41:07.123456+01:00") == "2026-12-07 09:41:07 UTC"
    hold_id = "01a24f6d-1111-7222-8333-444455556666"
    assert str(hold_link(hold_id)) == (
        f'<a class="mono hold" href="/console/holds/{hold_id}" title="{hold_id}">…444455556666</a>'
    )


@pytest.mark.parametrize("cursor", ["\u00b2", "\u0663", "12\u00b3"])
def test_a_cursor_of_non_ascii_digits_is_refused_not_a_500(cursor: str) -> None:
    """str.isdigit() accepts superscripts ('²': int() then raises) and other scripts' digits."""
    from ledger.console.accounts_pages import before_of
    from ledger.errors import ValidationFailed

    with pytest.raises(ValidationFailed):
        before_of(cursor)
