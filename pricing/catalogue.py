"""A model's catalogue fields: its default output allowance, its `n` cap and its retirement.

Per model a price document may give three optional fields besides its limits and rates:

- `default_output_tokens`: the output allowance O of a reservation whose request names
  no `max_output_tokens` (without it O is the model's `max_output_tokens`). A positive
  integer, at most the model's `max_output_tokens`;
- `max_n`: the most completions one request may ask for. A positive integer, at most
  `pricing.tokens.MAX_COMPLETIONS`; a request's `n` above it is `ModelLimitExceeded`
  (param ``n``). Without it the global bound alone applies;
- `retires_at`: when the model stops being served. A timezone-aware ISO 8601 timestamp
  (naive refused), kept in UTC. At or after it a new reservation or quote for the model
  is `ModelRetired`; before it the answer carries a notice (`notice_of`).

Invariants kept here:
- each refusal of a document is a `PriceDocumentInvalid` naming ``models[i].<field>``;
  bools, floats (even ``1.0``) and strings are refused as counts;
- absent fields change nothing: a document without them parses, canonicalises and
  hashes exactly as before they existed (`pricing.document` leaves absent ones out of
  the canonical form);
- retirement is judged against a time the caller passes (`now`), never a clock read
  here: the engine stays pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from pricing.errors import ModelLimitExceeded, ModelRetired, PriceDocumentInvalid
from pricing.tokens import MAX_COMPLETIONS, CountError, as_count

if TYPE_CHECKING:
    from pricing.document import ModelPrice

CATALOGUE_FIELDS = ("default_output_tokens", "max_n", "retires_at")


def _fail(param: str, message: str) -> NoReturn:
    raise PriceDocumentInvalid(param, message)


def parse_timestamp(value: object, param: str) -> datetime:
    """An aware ISO 8601 timestamp (string or datetime) in UTC; naive or malformed refused."""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            _fail(param, 'must be an ISO-8601 timestamp such as "2026-12-01T00:00:00Z"')
    elif isinstance(value, datetime):
        moment = value
    else:
        _fail(param, "must be an ISO-8601 timestamp string")
    if moment.tzinfo is None or moment.utcoffset() is None:
        _fail(param, "must include a timezone (e.g. a trailing Z); a naive time is ambiguous")
    return moment.astimezone(UTC)


def parse_catalogue_fields(obj: Mapping[str, object], path: str, *, max_output_tokens: int) -> dict[str, Any]:
    """The catalogue fields a model object gives (absent or null: left out), validated."""
    out: dict[str, Any] = {}
    default = obj.get("default_output_tokens")
    if default is not None:
        param = f"{path}.default_output_tokens"
        try:
            out["default_output_tokens"] = as_count(default, minimum=1)
        except CountError as exc:
            _fail(param, str(exc))
        if out["default_output_tokens"] > max_output_tokens:
            _fail(param, f"must not exceed the model's max_output_tokens ({max_output_tokens})")
    max_n = obj.get("max_n")
    if max_n is not None:
        try:
            out["max_n"] = as_count(max_n, minimum=1, maximum=MAX_COMPLETIONS)
        except CountError as exc:
            _fail(f"{path}.max_n", str(exc))
    retires_at = obj.get("retires_at")
    if retires_at is not None:
        out["retires_at"] = parse_timestamp(retires_at, f"{path}.retires_at")
    return out


def format_timestamp(moment: datetime) -> str:
    """ISO-8601 in UTC with a trailing Z: "2027-04-01T00:00:00Z"."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def catalogue_to_builtins(price: ModelPrice) -> dict[str, Any]:
    """The catalogue fields the model gives, for its canonical form (absent ones left out)."""
    out: dict[str, Any] = {}
    if price.default_output_tokens is not None:
        out["default_output_tokens"] = price.default_output_tokens
    if price.max_n is not None:
        out["max_n"] = price.max_n
    if price.retires_at is not None:
        out["retires_at"] = format_timestamp(price.retires_at)
    return out


def output_allowance(price: ModelPrice) -> int:
    """O when the request names no output limit: `default_output_tokens`, else `max_output_tokens`."""
    return price.default_output_tokens or price.max_output_tokens


def check_completions(price: ModelPrice, n: int) -> None:
    """Refuse `n` above the model's `max_n` (`ModelLimitExceeded`, param ``n``)."""
    if price.max_n is not None and n > price.max_n:
        per = "completion" if price.max_n == 1 else "completions"
        raise ModelLimitExceeded("n", f"{n} is above the model's limit of {price.max_n} {per} per request")


def is_retired(price: ModelPrice, now: datetime) -> bool:
    """Whether the model is retired at `now` (at or after `retires_at`)."""
    return price.retires_at is not None and now >= price.retires_at


def check_not_retired(price: ModelPrice, now: datetime) -> None:
    """Refuse a new reservation or quote for a model retired at `now` (`ModelRetired`)."""
    if price.retires_at is not None and now >= price.retires_at:
        raise ModelRetired(price.model, price.retires_at)


def notice_of(price: ModelPrice, now: datetime) -> dict[str, str] | None:
    """The notice an answer about `price`'s model carries, or None when it has no `retires_at`.

    ``{"code": "model_retiring", "message", "retires_at"}`` before the time, and
    ``{"code": "model_retired", ...}`` at or after it (a hold reserved before is still shown).
    """
    if price.retires_at is None:
        return None
    when = format_timestamp(price.retires_at)
    if now >= price.retires_at:
        return {
            "code": "model_retired",
            "message": f"{price.model} retired at {when}; new requests for it are refused",
            "retires_at": when,
        }
    return {
        "code": "model_retiring",
        "message": f"{price.model} retires at {when}; requests for it are refused from then on",
        "retires_at": when,
    }
