"""How the console writes amounts, times and hold ids for reading (Jinja filters).

The rounding rule (for reading only; the exact value is always in the `title`, and
every CSV carries exact values):
- an amount of 0.01 or more in magnitude, or zero, is shown with 2 decimals, rounded
  half away from zero, with `,` between thousands: `1,234.57`;
- a smaller non-zero amount keeps 4 significant digits (trailing zeros dropped), so a
  per-request charge never reads as `0.00`: `0.000316`, `0.003169`;
- a shown value that differs from the exact one is marked with a class (`rounded`).
Everything is `Decimal`; nothing here is a float.

Times are shown in UTC to the second (`2026-12-07 09:41:07 UTC`) inside `<time>` whose
`datetime` is the exact ISO value. A hold id (UUIDv7: its first 8 hex digits are a
timestamp that many holds share) is shown by its last 12 hex digits, the full id in
`title`, always as a link to the hold's page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from markupsafe import Markup, escape

from pricing.money import EXACT, format_amount

CENT = Decimal("0.01")
SIGNIFICANT = 4


def readable(exact: Decimal) -> str:
    """`exact` rounded for reading by the rule above (the caller keeps the exact value)."""
    # The EXACT context: a 38-digit balance does not fit the default 28-digit context.
    if exact == 0 or exact.copy_abs() >= CENT:
        return f"{exact.quantize(CENT, rounding=ROUND_HALF_UP, context=EXACT):,}"
    step = Decimal(1).scaleb(exact.adjusted() - SIGNIFICANT + 1)
    shown = exact.quantize(step, rounding=ROUND_HALF_UP, context=EXACT)
    text = f"{shown:f}"
    return text.rstrip("0") if "." in text else text


def money(value: Any, currency: str | None = None) -> Markup:
    """An amount (decimal string or Decimal) for a table cell: rounded, exact in `title`."""
    if value is None or value == "":
        return Markup("")
    try:
        exact = Decimal(str(value))
    except InvalidOperation:
        return Markup(escape(str(value)))
    if not exact.is_finite():
        return Markup(escape(str(value)))
    shown = readable(exact)
    suffix = f" {currency}" if currency else ""
    rounded = Decimal(shown.replace(",", "")) != exact
    return Markup('<span class="amount{}" title="{}{}">{}{}</span>').format(
        " rounded" if rounded else "", format_amount(exact), suffix, shown, suffix
    )


def utc(value: Any) -> str:
    """An ISO timestamp (or datetime) as `YYYY-MM-DD HH:MM:SS UTC`."""
    if value is None or value == "":
        return ""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when(value: Any) -> Markup:
    """`utc(value)` inside a `<time>` carrying the exact ISO value."""
    if value is None or value == "":
        return Markup("")
    exact = value.isoformat() if isinstance(value, datetime) else str(value)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(exact, exact, utc(value))


def short_hold(hold_id: Any) -> str:
    """The part of a hold id that tells holds apart: its last 12 hex digits."""
    return str(hold_id)[-12:]


def hold_link(hold_id: Any) -> Markup:
    if not hold_id:
        return Markup("")
    full = str(hold_id)
    return Markup('<a class="mono hold" href="/console/holds/{}" title="{}">…{}</a>').format(
        full, full, short_hold(full)
    )


FILTERS = {"money": money, "utc": utc, "when": when, "hold_link": hold_link, "short_hold": short_hold}
