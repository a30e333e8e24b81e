"""Price documents: parse, validate, canonicalise and hash what finance publishes.

A price document lists, per model, its token limits and a table of rates in currency
per 1,000,000 tokens, optionally with a second (long-context) table that applies to
the whole request once the prompt is above a threshold.

Invariants kept here (each refusal is a `PriceDocumentInvalid` naming the field):
- only known fields, at every level: a misspelt key ("cachedinput") is refused, never
  ignored, because ignoring it would silently change money; a JSON object with the
  same key twice is refused for the same reason;
- every rate is a plain decimal *string* ("2.5"), non-negative, at most 6 decimal
  places, at most `MAX_RATE`; a JSON number (2.5 or 3), an exponent ("1e-3"), NaN and
  null are refused. `input` and `output` are required; the other categories optional;
- `max_input_tokens`, `max_output_tokens` and `above_input_tokens` are positive
  integers (bools and 1.0 refused), and `above_input_tokens` < `max_input_tokens`
  (a threshold at or above the model's input limit would make the table dead);
- a `long_context` table prices exactly the categories of the standard table: none
  missing (contract) and none extra (decided here: a category priced only above the
  threshold would make the standard tier silently fall back to `input` for it);
- at least one model, no duplicates; a model name matches `MODEL_NAME_PATTERN`: 1-128
  characters, letters, digits and `._:/@+-`, starting with a letter or digit. Model
  names travel into CSV reports and logs, so one can never start like a spreadsheet
  formula (`=`, `+`, `-`, `@`) nor carry blanks or control characters. A document
  already stored (`stored=True`: a version published before this rule) is read with
  the older rule (non-empty, no surrounding whitespace), so no pinned version breaks;
- `currency` is three upper-case letters; `effective_at` is timezone-aware (naive
  refused) and kept in UTC, or absent/null meaning "when published";
- `source` is optional free text (it does not change money), "" when absent;
- per model, the optional catalogue fields `default_output_tokens`, `max_n` and
  `retires_at` (rules in `pricing.catalogue`); when absent they are left out of the
  canonical form, so a document without them hashes as it did before they existed.

Rates stay exact `Decimal`s from the string; nothing here ever touches a float.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NoReturn

import msgspec

from pricing.catalogue import CATALOGUE_FIELDS, catalogue_to_builtins, parse_catalogue_fields
from pricing.errors import ModelNotPriced, PriceDocumentInvalid
from pricing.money import AmountError, format_amount, parse_rate
from pricing.tokens import CountError, as_count

CATEGORIES = ("input", "cached_input", "cache_write", "cache_write_5m", "cache_write_1h", "output")
INPUT_SIDE_CATEGORIES = ("input", "cached_input", "cache_write", "cache_write_5m", "cache_write_1h")
# A rate above 1,000,000 per 1M tokens (one currency unit per token) is certainly a typo,
# and the bound keeps tokens x rate inside NUMERIC(38, 12) for any accepted count.
MAX_RATE = Decimal(1_000_000)

_CATEGORY_SET = frozenset(CATEGORIES)
_CURRENCY = re.compile(r"[A-Z]{3}")
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$"
_MODEL_NAME = re.compile(MODEL_NAME_PATTERN)
_DOCUMENT_FIELDS = ("currency", "effective_at", "source", "models")
_MODEL_FIELDS = ("model", "max_input_tokens", "max_output_tokens", "rates", "long_context", *CATALOGUE_FIELDS)
_LONG_CONTEXT_FIELDS = ("above_input_tokens", "rates")


class Rates(msgspec.Struct, frozen=True, kw_only=True):
    """One rate table: category -> rate per 1M tokens, for the categories it gives."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_5m: Decimal | None = None
    cache_write_1h: Decimal | None = None

    def get(self, category: str) -> Decimal | None:
        """The rate of `category`, or None when the table does not give it (or it is unknown)."""
        if category not in _CATEGORY_SET:
            return None
        value: Decimal | None = getattr(self, category)
        return value

    def __getitem__(self, category: str) -> Decimal:
        value = self.get(category)
        if value is None:
            raise KeyError(category)
        return value

    def __contains__(self, category: object) -> bool:
        return isinstance(category, str) and self.get(category) is not None

    def categories(self) -> tuple[str, ...]:
        """The categories this table gives, in contract order."""
        return tuple(c for c in CATEGORIES if getattr(self, c) is not None)

    def items(self) -> tuple[tuple[str, Decimal], ...]:
        """(category, rate) pairs for the categories given, in contract order."""
        return tuple((c, v) for c in CATEGORIES if (v := getattr(self, c)) is not None)


class LongContext(msgspec.Struct, frozen=True, kw_only=True):
    """Rates for the whole request once `prompt_tokens` > `above_input_tokens`."""

    above_input_tokens: int
    rates: Rates


class ModelPrice(msgspec.Struct, frozen=True, kw_only=True):
    """One model's limits and rate tables, and its catalogue fields (`pricing.catalogue`)."""

    model: str
    max_input_tokens: int
    max_output_tokens: int
    rates: Rates
    long_context: LongContext | None = None
    default_output_tokens: int | None = None
    max_n: int | None = None
    retires_at: datetime | None = None


class PriceDocument(msgspec.Struct, frozen=True, kw_only=True):
    """A whole price document, as validated by `parse_price_document`."""

    currency: str
    effective_at: datetime | None
    source: str
    models: tuple[ModelPrice, ...]

    def model(self, name: str) -> ModelPrice:
        """The price of model `name`; `ModelNotPriced` if the document has none."""
        for price in self.models:
            if price.model == name:
                return price
        raise ModelNotPriced(name)

    def model_names(self) -> tuple[str, ...]:
        return tuple(price.model for price in self.models)


# --- parsing -------------------------------------------------------------------------


class _JsonObject(dict[str, Any]):
    """A decoded JSON object that remembers keys it saw more than once."""

    duplicate_keys: tuple[str, ...] = ()


def _object_pairs(pairs: list[tuple[str, Any]]) -> _JsonObject:
    obj = _JsonObject()
    duplicates: list[str] = []
    for key, value in pairs:
        if key in obj:
            duplicates.append(key)
        obj[key] = value
    obj.duplicate_keys = tuple(duplicates)
    return obj


def _refuse_constant(name: str) -> NoReturn:
    raise PriceDocumentInvalid("", f"{name} is not valid JSON")


def _load_json(raw: bytes | bytearray | memoryview | str) -> object:
    text = bytes(raw) if isinstance(raw, bytearray | memoryview) else raw
    try:
        return json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_refuse_constant)
    except PriceDocumentInvalid:
        raise
    except (ValueError, RecursionError) as exc:
        raise PriceDocumentInvalid("", f"the price document is not valid JSON: {exc}") from None


def load_document_json(raw: bytes | bytearray | memoryview | str) -> object:
    """Decode JSON exactly as `parse_price_document` does (a repeated key is remembered and
    refused when parsed, NaN/Infinity refused), for callers that strip a wrapper field first."""
    return _load_json(raw)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fail(param: str, message: str) -> NoReturn:
    raise PriceDocumentInvalid(param, message)


def _object(value: object, path: str, allowed: tuple[str, ...]) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        _fail(path, "must be a JSON object")
    if isinstance(value, _JsonObject) and value.duplicate_keys:
        _fail(_join(path, value.duplicate_keys[0]), "appears more than once in the same object")
    for key in value:
        if key not in allowed:
            _fail(_join(path, str(key)), f"unknown field; expected one of: {', '.join(allowed)}")
    return value


def _required(obj: Mapping[str, object], key: str, path: str) -> object:
    value = obj.get(key)
    if value is None:
        _fail(_join(path, key), "is required")
    return value


def _positive_limit(value: object, param: str) -> int:
    try:
        return as_count(value, minimum=1)
    except CountError as exc:
        _fail(param, str(exc))


def _rate(value: object, param: str) -> Decimal:
    if isinstance(value, bool | int | float):
        _fail(param, 'must be a decimal string such as "2.5", not a JSON number')
    if value is None:
        _fail(param, "must be a decimal string; leave the category out to use its fallback")
    try:
        rate = parse_rate(value, what="rate")
    except AmountError as exc:
        _fail(param, str(exc))
    if rate > MAX_RATE:
        _fail(param, f"rate is above {MAX_RATE} per 1M tokens")
    return rate if rate != 0 else Decimal(0)  # no "-0" in a rate table


def _rates(value: object, path: str) -> Rates:
    obj = _object(value, path, CATEGORIES)
    parsed = {
        category: _rate(obj[category], f"{path}.{category}") for category in CATEGORIES if category in obj
    }
    for category in ("input", "output"):
        if category not in parsed:
            _fail(f"{path}.{category}", "is required")
    return Rates(**parsed)


def _long_context(value: object, path: str, standard: Rates, max_input_tokens: int) -> LongContext:
    obj = _object(value, path, _LONG_CONTEXT_FIELDS)
    above = _positive_limit(_required(obj, "above_input_tokens", path), f"{path}.above_input_tokens")
    if above >= max_input_tokens:
        _fail(
            f"{path}.above_input_tokens",
            f"must be below the model's max_input_tokens ({max_input_tokens}), or the table never applies",
        )
    rates = _rates(_required(obj, "rates", path), f"{path}.rates")
    check_long_context_categories(standard, rates, f"{path}.rates")
    return LongContext(above_input_tokens=above, rates=rates)


def check_long_context_categories(standard: Rates, long: Rates, path: str) -> None:
    """A long-context table gives exactly the categories of the standard one (`path`: where
    the long-context table sits; a refusal names `path.<category>`)."""
    for category in standard.categories():
        if category not in long:
            _fail(
                f"{path}.{category}", "the long-context table must give every category the standard one gives"
            )
    for category in long.categories():
        if category not in standard:
            _fail(f"{path}.{category}", "the standard table does not give this category, so this one may not")


def _model(value: object, path: str, *, stored: bool) -> ModelPrice:
    obj = _object(value, path, _MODEL_FIELDS)
    name = _required(obj, "model", path)
    if not isinstance(name, str) or not name.strip():
        _fail(f"{path}.model", "must be a non-empty string")
    if name != name.strip():
        _fail(f"{path}.model", "must not start or end with whitespace")
    if not stored and not _MODEL_NAME.fullmatch(name):
        _fail(
            f"{path}.model",
            "must be 1-128 characters of letters, digits and ._:/@+- starting with a letter or digit",
        )
    max_input = _positive_limit(_required(obj, "max_input_tokens", path), f"{path}.max_input_tokens")
    max_output = _positive_limit(_required(obj, "max_output_tokens", path), f"{path}.max_output_tokens")
    rates = _rates(_required(obj, "rates", path), f"{path}.rates")
    long_raw = obj.get("long_context")
    long_context = (
        None if long_raw is None else _long_context(long_raw, f"{path}.long_context", rates, max_input)
    )
    return ModelPrice(
        model=name,
        max_input_tokens=max_input,
        max_output_tokens=max_output,
        rates=rates,
        long_context=long_context,
        **parse_catalogue_fields(obj, path, max_output_tokens=max_output),
    )


def _effective_at(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            _fail("effective_at", 'must be an ISO-8601 timestamp such as "2026-12-01T00:00:00Z"')
    elif isinstance(value, datetime):
        moment = value
    else:
        _fail("effective_at", "must be an ISO-8601 timestamp string")
    if moment.tzinfo is None or moment.utcoffset() is None:
        _fail("effective_at", "must include a timezone (e.g. a trailing Z); a naive time is ambiguous")
    return moment.astimezone(UTC)


def parse_price_document(raw: bytes | str | Mapping[str, object], *, stored: bool = False) -> PriceDocument:
    """Validate a price document given as JSON text/bytes or already-decoded builtins.

    `stored`: the document of a version already published (see the model-name rule above).
    """
    data = _load_json(raw) if isinstance(raw, bytes | bytearray | memoryview | str) else raw
    top = _object(data, "", _DOCUMENT_FIELDS)
    currency = _required(top, "currency", "")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        _fail("currency", 'must be a three-letter upper-case currency code such as "USD"')
    effective_at = _effective_at(top.get("effective_at"))
    source = top.get("source")
    if source is None:
        source = ""
    if not isinstance(source, str):
        _fail("source", "must be a string")
    models_raw = _required(top, "models", "")
    if not isinstance(models_raw, list | tuple):
        _fail("models", "must be a JSON array of model prices")
    if not models_raw:
        _fail("models", "must list at least one model")
    models: list[ModelPrice] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(models_raw):
        price = _model(item, f"models[{index}]", stored=stored)
        if price.model in seen:
            _fail(
                f"models[{index}].model",
                f"duplicate model {price.model!r} (already models[{seen[price.model]}])",
            )
        seen[price.model] = index
        models.append(price)
    return PriceDocument(currency=currency, effective_at=effective_at, source=source, models=tuple(models))


# --- canonical form ------------------------------------------------------------------


def format_timestamp(moment: datetime) -> str:
    """ISO-8601 in UTC with a trailing Z: "2026-12-01T00:00:00Z"."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def rates_to_builtins(rates: Rates) -> dict[str, str]:
    return {category: format_amount(rate) for category, rate in rates.items()}


def model_price_to_builtins(price: ModelPrice) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": price.model,
        "max_input_tokens": price.max_input_tokens,
        "max_output_tokens": price.max_output_tokens,
        "rates": rates_to_builtins(price.rates),
    }
    if price.long_context is not None:
        out["long_context"] = {
            "above_input_tokens": price.long_context.above_input_tokens,
            "rates": rates_to_builtins(price.long_context.rates),
        }
    out.update(catalogue_to_builtins(price))  # absent ones left out: older hashes unchanged
    return out


def document_to_builtins(doc: PriceDocument) -> dict[str, Any]:
    """The canonical JSON-able form: rates as plain decimal strings, models in document order.

    `parse_price_document(document_to_builtins(doc)) == doc` for every valid document.
    """
    return {
        "currency": doc.currency,
        "effective_at": None if doc.effective_at is None else format_timestamp(doc.effective_at),
        "source": doc.source,
        "models": [model_price_to_builtins(price) for price in doc.models],
    }


def content_hash(doc: PriceDocument) -> str:
    """sha256 (hex) of the canonical JSON of the document's content.

    The content is everything except `effective_at`: the same prices published again at
    another time hash the same, so a refresh that changes nothing is recognisable. The
    models are sorted by name (their order changes no price); keys are sorted and the
    JSON has no whitespace, so the hash does not depend on how the document was written
    ("2.50" and "2.5" hash alike).
    """
    body = document_to_builtins(doc)
    del body["effective_at"]
    body["models"] = sorted(body["models"], key=lambda m: str(m["model"]))
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
