"""What changes between two price documents, and which changes are too large to trust.

Used by ``ledger prices refresh`` to show a repricing and to refuse one that moves any
rate by more than a factor (e.g. 3x) without a human looking. Besides rates it reports,
for models in both documents, the limits that change (token limits, the default output
allowance, `max_n`) and the retirements (`retires_at`) that change.

Invariants kept here:
- rates are compared per model, per table (``standard`` / ``long_context``) and per
  category, exactly (`Decimal`, no division): a rate given on one side only is a change
  with ``None`` on the other; models added or removed show up as such changes for
  every rate they have, and also in `DocumentDiff.added_models` / `removed_models`;
- `excessive_changes` counts a change as excessive when new > factor x old or
  old > factor x new, with both rates given. Decided here:
  * a rate that appears or disappears (None on one side), or goes from 0 to more than 0,
    is *not* excessive (there is no ratio to judge, and a new category is ordinary);
  * a rate that goes from more than 0 to exactly 0 *is* excessive (an infinite cut, and
    the classic scraping slip that would make usage free).
  Only literal table entries are compared: a category that disappears and so falls
  back to another rate is reported as a disappearing rate, not as a ratio.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

import msgspec

from pricing.catalogue import format_timestamp
from pricing.document import CATEGORIES, ModelPrice, PriceDocument, Rates
from pricing.money import format_amount

Table = Literal["standard", "long_context"]
Limit = Literal[
    "max_input_tokens", "max_output_tokens", "above_input_tokens", "default_output_tokens", "max_n"
]


class RateChange(msgspec.Struct, frozen=True):
    """One rate that differs; `old` / `new` is None where that side does not give it."""

    model: str
    table: Table
    category: str
    old: Decimal | None
    new: Decimal | None


class LimitChange(msgspec.Struct, frozen=True):
    """A limit of a model present in both documents that differs: a token limit, its default
    output allowance or its `max_n` (None: not given, e.g. no long-context table, no max_n)."""

    model: str
    limit: Limit
    old: int | None
    new: int | None


class RetirementChange(msgspec.Struct, frozen=True):
    """A model present in both documents whose `retires_at` differs (None: no retirement)."""

    model: str
    old: datetime | None
    new: datetime | None


class DocumentDiff(msgspec.Struct, frozen=True):
    added_models: tuple[str, ...]
    removed_models: tuple[str, ...]
    rates: tuple[RateChange, ...]
    limits: tuple[LimitChange, ...]
    retirements: tuple[RetirementChange, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added_models or self.removed_models or self.rates or self.limits or self.retirements)


def _table_changes(model: str, table: Table, old: Rates | None, new: Rates | None) -> list[RateChange]:
    changes: list[RateChange] = []
    for category in CATEGORIES:
        before = None if old is None else old.get(category)
        after = None if new is None else new.get(category)
        if before != after:
            changes.append(RateChange(model, table, category, before, after))
    return changes


def _model_rate_changes(model: str, old: ModelPrice | None, new: ModelPrice | None) -> list[RateChange]:
    def long_rates(price: ModelPrice | None) -> Rates | None:
        return None if price is None or price.long_context is None else price.long_context.rates

    return _table_changes(
        model, "standard", None if old is None else old.rates, None if new is None else new.rates
    ) + _table_changes(model, "long_context", long_rates(old), long_rates(new))


def _by_name(doc: PriceDocument) -> dict[str, ModelPrice]:
    return {price.model: price for price in doc.models}


def diff_documents(old: PriceDocument, new: PriceDocument) -> list[RateChange]:
    """Every rate that differs, models in `old` order then models new in `new`."""
    before, after = _by_name(old), _by_name(new)
    names = list(before) + [name for name in after if name not in before]
    changes: list[RateChange] = []
    for name in names:
        changes.extend(_model_rate_changes(name, before.get(name), after.get(name)))
    return changes


def diff_limits(old: PriceDocument, new: PriceDocument) -> list[LimitChange]:
    """Limits that differ (token limits, default output allowance, max_n), for models in both documents."""
    after = _by_name(new)
    changes: list[LimitChange] = []
    for price in old.models:
        other = after.get(price.model)
        if other is None:
            continue
        pairs: tuple[tuple[Limit, int | None, int | None], ...] = (
            ("max_input_tokens", price.max_input_tokens, other.max_input_tokens),
            ("max_output_tokens", price.max_output_tokens, other.max_output_tokens),
            (
                "above_input_tokens",
                None if price.long_context is None else price.long_context.above_input_tokens,
                None if other.long_context is None else other.long_context.above_input_tokens,
            ),
            ("default_output_tokens", price.default_output_tokens, other.default_output_tokens),
            ("max_n", price.max_n, other.max_n),
        )
        changes.extend(LimitChange(price.model, limit, a, b) for limit, a, b in pairs if a != b)
    return changes


def diff_retirements(old: PriceDocument, new: PriceDocument) -> list[RetirementChange]:
    """Retirements (`retires_at`) that differ, for models in both documents."""
    after = _by_name(new)
    return [
        RetirementChange(price.model, price.retires_at, other.retires_at)
        for price in old.models
        if (other := after.get(price.model)) is not None and other.retires_at != price.retires_at
    ]


def compare_documents(old: PriceDocument, new: PriceDocument) -> DocumentDiff:
    """Added and removed models, rate, limit and retirement changes in one value."""
    before, after = _by_name(old), _by_name(new)
    return DocumentDiff(
        added_models=tuple(name for name in after if name not in before),
        removed_models=tuple(name for name in before if name not in after),
        rates=tuple(diff_documents(old, new)),
        limits=tuple(diff_limits(old, new)),
        retirements=tuple(diff_retirements(old, new)),
    )


def is_excessive(change: RateChange, factor: Decimal) -> bool:
    """Whether one change moves a rate by more than `factor` (see the module docstring)."""
    old, new = change.old, change.new
    if old is None or new is None or old == 0:
        return False
    if new == 0:
        return True
    return new > factor * old or old > factor * new


def excessive_changes(old: PriceDocument, new: PriceDocument, factor: Decimal) -> list[RateChange]:
    """The rate changes where new/old > factor or old/new > factor; `factor` must be >= 1."""
    if not isinstance(factor, Decimal) or not factor.is_finite() or factor < 1:
        raise ValueError("factor must be a finite Decimal of at least 1")
    return [change for change in diff_documents(old, new) if is_excessive(change, factor)]


def _rate_text(rate: Decimal | None) -> str | None:
    return None if rate is None else format_amount(rate)


def _moment_text(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def diff_to_builtins(diff: DocumentDiff) -> dict[str, Any]:
    """JSON-able form of a `DocumentDiff`, rates as plain decimal strings, times as ISO 8601 UTC."""
    return {
        "added_models": list(diff.added_models),
        "removed_models": list(diff.removed_models),
        "rates": [
            {
                "model": c.model,
                "table": c.table,
                "category": c.category,
                "old": _rate_text(c.old),
                "new": _rate_text(c.new),
            }
            for c in diff.rates
        ],
        "limits": [{"model": c.model, "limit": c.limit, "old": c.old, "new": c.new} for c in diff.limits],
        "retirements": [
            {"model": c.model, "old": _moment_text(c.old), "new": _moment_text(c.new)}
            for c in diff.retirements
        ],
    }
