"""Server-side SVG bar charts: no script, no inline style (the console's CSP allows neither).

`bar_chart` draws one bar per (label, amount), scaled to the largest magnitude; a
negative amount (a refunding true-up) is drawn below the zero line with its own class.
Geometry is computed in `Decimal` and written with one decimal place: an amount is
never turned into a float. Colours and fonts come from `console.css` via classes.
Each bar carries a `<title>` with its label and exact amount (a tooltip, and text for
screen readers); the chart as a whole has `role="img"` and an `aria-label`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Decimal

from markupsafe import Markup, escape

from ledger.console.display import readable
from pricing.money import format_amount

HEIGHT = Decimal(220)
LEFT = Decimal(86)  # room for the axis labels
RIGHT = Decimal(18)  # room for half of the last bar's label
BOTTOM = Decimal(34)  # room for the bar labels
TOP = Decimal(12)
TENTH = Decimal("0.1")


def _n(value: Decimal) -> str:
    return f"{value.quantize(TENTH, rounding=ROUND_HALF_UP):f}"


def bar_chart(
    points: Sequence[tuple[str, Decimal]],
    *,
    title: str,
    currency: str,
    tick: Callable[[str], str] = str,
    width: int = 1200,
    labels: int = 16,
) -> Markup:
    """An SVG `width` units wide, one bar per point; at most about `labels` bar labels are written."""
    chart_w = Decimal(width)
    if not points:
        return Markup('<p class="muted">Nothing to chart in this period.</p>')
    top = max((amount for _, amount in points), default=Decimal(0))
    bottom = min((amount for _, amount in points), default=Decimal(0))
    top, bottom = max(top, Decimal(0)), min(bottom, Decimal(0))
    span = (top - bottom) or Decimal(1)
    plot_h = HEIGHT - TOP - BOTTOM
    zero_y = TOP + plot_h * top / span
    slot = (chart_w - LEFT - RIGHT) / len(points)
    bar_w = max(slot * Decimal("0.7"), Decimal(1))
    every = max(1, -(-len(points) // labels))
    parts = [
        Markup(
            '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}" '
            'xmlns="http://www.w3.org/2000/svg">'
        ).format(_n(chart_w), _n(HEIGHT), title),
        Markup('<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>').format(
            _n(LEFT), _n(zero_y), _n(chart_w), _n(zero_y)
        ),
        Markup('<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>').format(
            _n(LEFT - 6), _n(TOP + 4), f"{readable(top)} {currency}"
        ),
    ]
    if bottom < 0:
        parts.append(
            Markup('<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>').format(
                _n(LEFT - 6), _n(TOP + plot_h), f"{readable(bottom)} {currency}"
            )
        )
    parts.append(
        Markup('<text class="tick" x="{}" y="{}" text-anchor="end">0</text>').format(
            _n(LEFT - 6), _n(zero_y + 4)
        )
    )
    for i, (label, amount) in enumerate(points):
        x = LEFT + slot * i + (slot - bar_w) / 2
        h = plot_h * abs(amount) / span
        y = zero_y - h if amount >= 0 else zero_y
        parts.append(
            Markup(
                '<rect class="{}" x="{}" y="{}" width="{}" height="{}"><title>{}: {} {}</title></rect>'
            ).format(
                "bar" if amount >= 0 else "bar bar-negative",
                _n(x),
                _n(y),
                _n(bar_w),
                _n(h),
                label,
                format_amount(amount),
                currency,
            )
        )
        if (len(points) - 1 - i) % every == 0:  # counted from the newest: the last bar is labelled
            parts.append(
                Markup('<text class="label" x="{}" y="{}" text-anchor="middle">{}</text>').format(
                    _n(x + bar_w / 2), _n(HEIGHT - BOTTOM + 16), tick(label)
                )
            )
    parts.append(Markup("</svg>"))
    return Markup("").join(escape(p) for p in parts)
