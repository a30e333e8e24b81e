"""Price plans: parse, validate, canonicalise, hash and materialise what finance publishes.

A plan revision's document changes the list rates of a price version for the accounts
on the plan:

```json
{"adjust_percent": "-10",
 "models": {"gpt-5": {"adjust_percent": "-20"},
            "claude-sonnet-4-5": {"rates": {"input": "2.5", "output": "12"},
                                  "long_context": {"rates": {"input": "5", "output": "18"}}}}}
```

Rules kept here (each refusal a `PriceDocumentInvalid` naming the field):
- `adjust_percent` (optional, default "0") is a plain decimal string with at most
  `PERCENT_PLACES` (4) decimal places within [`MIN_PERCENT`, `MAX_PERCENT`] = [-100, 1000]
  (a 100 % discount makes a model free; more than 11 x the list rate is certainly a typo);
- per model either `adjust_percent` (replaces the plan-wide one for that model) or
  `rates` (+ optional `long_context.rates`): absolute tables in the plan's currency,
  validated exactly like a price document's (decimal strings, <= 6 places, `input` and
  `output` required, <= `MAX_RATE`); both on one model, unknown fields, a repeated JSON
  key, or a model name outside `MODEL_NAME_PATTERN` are refused. A model the price
  version does not list is unused;
- precedence: the model's override rates > the model's percent > the plan's percent > list.

Materialisation (`materialise`): effective rate = list rate x (100 + p) / 100, exact,
then rounded to 6 decimal places (the rate precision of price documents) with
ROUND_HALF_UP; so every charge tokens x rate / 10^6 stays exact at 10^-12. An effective
rate above `MAX_RATE` refuses the publication (`PlanRateTooHigh`). Limits and every
other catalogue field are the list's, untouched. An override for a model whose list
price has a long-context table uses the override's `long_context.rates` above the same
threshold when given, else its standard rates in both tiers; an override's
`long_context` for a model without one is unused. In each tier the override's table
gives only the categories it names: every other category the list's table of that tier
prices takes the list rate under the plan-wide `adjust_percent` (same rounding). The
list's two tables give the same categories, and so do the override's, so both
effective tiers give the union of the list's and the override's categories.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import msgspec

from pricing.document import (
    _MODEL_NAME,
    MAX_RATE,
    LongContext,
    ModelPrice,
    PriceDocument,
    Rates,
    _fail,
    _load_json,
    _object,
    _rates,
    check_long_context_categories,
    rates_to_builtins,
)
from pricing.errors import PriceDocumentInvalid
from pricing.money import EXACT, AmountError, format_amount, parse_decimal

PERCENT_PLACES = 4
MIN_PERCENT = Decimal(-100)
MAX_PERCENT = Decimal(1000)
RATE_QUANTUM = Decimal("0.000001")
_HUNDRED = Decimal(100)

_PLAN_FIELDS = ("adjust_percent", "models")
_MODEL_FIELDS = ("adjust_percent", "rates", "long_context")
_LONG_CONTEXT_FIELDS = ("rates",)


class PlanRateTooHigh(PriceDocumentInvalid):
    """A materialised rate above `MAX_RATE`: the publication is refused (422)."""


class ModelOverride(msgspec.Struct, frozen=True, kw_only=True):
    """One model's entry: a percent, or absolute rate tables (never both)."""

    adjust_percent: Decimal | None = None
    rates: Rates | None = None
    long_context_rates: Rates | None = None


class PlanDocument(msgspec.Struct, frozen=True, kw_only=True):
    adjust_percent: Decimal
    models: tuple[tuple[str, ModelOverride], ...]  # sorted by model name

    def override(self, model: str) -> ModelOverride | None:
        for name, entry in self.models:
            if name == model:
                return entry
        return None


def parse_percent(value: object, param: str) -> Decimal:
    """A percentage: a plain decimal string, <= 4 places, within [-100, 1000]."""
    if isinstance(value, bool | int | float) or not isinstance(value, str):
        _fail(param, 'must be a decimal string such as "-10", not a JSON number')
    try:
        percent = parse_decimal(value, places=PERCENT_PLACES, what="adjust_percent")
    except AmountError as exc:
        _fail(param, str(exc))
    if not MIN_PERCENT <= percent <= MAX_PERCENT:
        _fail(param, f"must be within [{MIN_PERCENT}, {MAX_PERCENT}]")
    return percent if percent != 0 else Decimal(0)


def _model(value: object, path: str) -> ModelOverride:
    obj = _object(value, path, _MODEL_FIELDS)
    if "adjust_percent" in obj and ("rates" in obj or "long_context" in obj):
        _fail(path, "give either adjust_percent or rates, not both")
    if "adjust_percent" in obj:
        return ModelOverride(adjust_percent=parse_percent(obj["adjust_percent"], f"{path}.adjust_percent"))
    if "rates" not in obj:
        _fail(f"{path}.rates", "is required (or give adjust_percent)")
    rates = _rates(obj["rates"], f"{path}.rates")
    long_rates = None
    long_raw = obj.get("long_context")  # present when "long_context" in obj
    if "long_context" in obj:
        long_obj = _object(long_raw, f"{path}.long_context", _LONG_CONTEXT_FIELDS)
        if "rates" not in long_obj:
            _fail(f"{path}.long_context.rates", "is required")
        long_rates = _rates(long_obj["rates"], f"{path}.long_context.rates")
        check_long_context_categories(rates, long_rates, f"{path}.long_context.rates")
    return ModelOverride(rates=rates, long_context_rates=long_rates)


def parse_plan_document(raw: bytes | str | Mapping[str, object]) -> PlanDocument:
    """Validate a plan document given as JSON text/bytes or decoded builtins."""
    data = _load_json(raw) if isinstance(raw, bytes | bytearray | memoryview | str) else raw
    top = _object(data, "", _PLAN_FIELDS)
    # absent means none; an explicit null is refused like any other non-string / non-object
    percent = (
        parse_percent(top["adjust_percent"], "adjust_percent") if "adjust_percent" in top else Decimal(0)
    )
    models_raw = top.get("models", {})
    models_obj = _object(models_raw, "models", tuple(models_raw) if isinstance(models_raw, Mapping) else ())
    models: list[tuple[str, ModelOverride]] = []
    for name, entry in models_obj.items():
        if not isinstance(name, str) or not _MODEL_NAME.fullmatch(name):
            _fail(
                f"models.{name}",
                "model names are 1-128 characters of letters, digits and ._:/@+- "
                "starting with a letter or digit",
            )
        models.append((name, _model(entry, f"models.{name}")))
    models.sort(key=lambda item: item[0])
    return PlanDocument(adjust_percent=percent, models=tuple(models))


def plan_to_builtins(plan: PlanDocument) -> dict[str, Any]:
    """The canonical JSON-able form: percents and rates as plain decimal strings, models sorted.

    `parse_plan_document(plan_to_builtins(p)) == p` for every valid plan."""
    models: dict[str, Any] = {}
    for name, entry in plan.models:
        if entry.adjust_percent is not None:
            models[name] = {"adjust_percent": format_amount(entry.adjust_percent)}
        else:
            assert entry.rates is not None
            body: dict[str, Any] = {"rates": rates_to_builtins(entry.rates)}
            if entry.long_context_rates is not None:
                body["long_context"] = {"rates": rates_to_builtins(entry.long_context_rates)}
            models[name] = body
    return {"adjust_percent": format_amount(plan.adjust_percent), "models": models}


def plan_hash(plan: PlanDocument) -> str:
    """sha256 (hex) of the canonical JSON (sorted keys, no whitespace): "-10" and "-10.00"
    hash alike, and so do two orders of the same models."""
    text = json.dumps(plan_to_builtins(plan), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- materialisation -----------------------------------------------------------------


def adjusted_rate(rate: Decimal, percent: Decimal, *, param: str = "") -> Decimal:
    """rate x (100 + percent) / 100, exact, rounded to 6 places ROUND_HALF_UP; above MAX_RATE refused."""
    exact = EXACT.divide(EXACT.multiply(rate, EXACT.add(_HUNDRED, percent)), _HUNDRED)
    rounded = exact.quantize(RATE_QUANTUM, rounding=ROUND_HALF_UP, context=EXACT)
    if rounded > MAX_RATE:
        raise PlanRateTooHigh(
            param, f"the effective rate {format_amount(rounded)} is above {MAX_RATE} per 1M tokens"
        )
    return Decimal(0) if rounded == 0 else rounded


def _adjust(rates: Rates, percent: Decimal, param: str) -> Rates:
    return Rates(**{c: adjusted_rate(r, percent, param=f"{param}.{c}") for c, r in rates.items()})


def _merge(override: Rates, listed: Rates, percent: Decimal, param: str) -> Rates:
    """The override's categories as given; every other category `listed` prices at the list
    rate under `percent` (so an omitted category is never dearer by falling back to another)."""
    merged = dict(override.items())
    for category, rate in listed.items():
        if category not in merged:
            merged[category] = adjusted_rate(rate, percent, param=f"{param}.{category}")
    return Rates(**merged)


def materialise_model(plan: PlanDocument, price: ModelPrice) -> ModelPrice:
    """The effective price of one list model under `plan` (limits and other fields the list's)."""
    entry = plan.override(price.model)
    param = f"models.{price.model}"
    if entry is not None and entry.rates is not None:
        rates = _merge(entry.rates, price.rates, plan.adjust_percent, f"{param}.rates")
        long_context = price.long_context
        if long_context is not None:
            long_context = LongContext(
                above_input_tokens=long_context.above_input_tokens,
                rates=_merge(
                    entry.long_context_rates or entry.rates,
                    long_context.rates,
                    plan.adjust_percent,
                    f"{param}.long_context.rates",
                ),
            )
        return msgspec.structs.replace(price, rates=rates, long_context=long_context)
    percent = plan.adjust_percent
    if entry is not None and entry.adjust_percent is not None:
        percent = entry.adjust_percent
    rates = _adjust(price.rates, percent, f"{param}.rates")
    long_context = price.long_context
    if long_context is not None:
        long_context = LongContext(
            above_input_tokens=long_context.above_input_tokens,
            rates=_adjust(long_context.rates, percent, f"{param}.long_context.rates"),
        )
    return msgspec.structs.replace(price, rates=rates, long_context=long_context)


def materialise(plan: PlanDocument, document: PriceDocument) -> tuple[ModelPrice, ...]:
    """Every model of the price document at the plan's effective rates (refusal: `PlanRateTooHigh`)."""
    return tuple(materialise_model(plan, price) for price in document.models)
