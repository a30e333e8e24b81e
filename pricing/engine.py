"""The cost engine: what a usage costs (`compute_charge`) and what to hold (`size_reservation`).

Invariants kept here:
- exact arithmetic only: every line is tokens x rate / 10^6 with `Decimal` at 80 digits
  (`pricing.money.tokens_cost`), and a charge is the exact sum of its lines: no
  rounding anywhere in pricing;
- the tier is decided by P = prompt_tokens alone, before cache reads or writes are
  subtracted: the long-context table applies to every line when the model has one and
  P > `above_input_tokens` (strictly greater; P equal to the threshold is standard);
- each line's rate is the first that the tier's table gives, in the contract's order:
  input: input; cached_input: cached_input, input; cache_write_5m: cache_write_5m,
  cache_write, input; cache_write_1h: cache_write_1h, cache_write, input;
  cache_write (W - W5 - W1): cache_write, cache_write_5m, input; output: output.
  A rate of 0 is a rate that exists (it does not fall back);
- lines come in that contract order; lines with zero tokens are left out;
- an omitted output limit reserves the model's `default_output_tokens` when it has one
  (else its maximum), and `n` above the model's `max_n` is refused (`pricing.catalogue`);
- a reservation covers the worst case: A x (highest input-side rate) + O x n x
  (highest output rate), over the standard table and also the long-context table when
  A is above its threshold. So for any usage with P <= A and C <= O x n the charge is
  never more than the reservation;
- usage is plausible only within the model's limits (`check_usage_limits`): P at most
  `max_input_tokens`, C at most `max_output_tokens` x n. Anything above cannot have
  been served by the model and is refused rather than charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

import msgspec

from pricing.catalogue import check_completions, output_allowance
from pricing.document import INPUT_SIDE_CATEGORIES, ModelPrice, Rates
from pricing.errors import ModelLimitExceeded, ReservationInvalid
from pricing.money import EXACT, ZERO, format_amount, parse_amount, parse_rate, tokens_cost
from pricing.tokens import MAX_COMPLETIONS, MAX_TOKENS, CountError, as_count
from pricing.usage import Usage

Tier = Literal["standard", "long_context"]
LINE_CATEGORIES = ("input", "cached_input", "cache_write_5m", "cache_write_1h", "cache_write", "output")


class ChargeLine(msgspec.Struct, frozen=True):
    """One priced category: `amount` = `tokens` x `rate` / 10^6, exactly."""

    category: str
    tokens: int
    rate: Decimal
    amount: Decimal


class Charge(msgspec.Struct, frozen=True):
    """What a usage costs: `amount` is the exact sum of `lines` (zero-token lines left out)."""

    amount: Decimal
    tier: Tier
    lines: tuple[ChargeLine, ...]


class Reservation(msgspec.Struct, frozen=True):
    """What to hold before a request runs, and how it was sized."""

    input_allowance: int
    output_allowance: int
    n: int
    input_rate: Decimal
    output_rate: Decimal
    tier: Tier
    amount: Decimal


def _first(*rates: Decimal | None) -> Decimal:
    for rate in rates:
        if rate is not None:
            return rate
    raise AssertionError("unreachable: every fallback chain ends in input or output")


def _tier(price: ModelPrice, prompt_tokens: int) -> tuple[Tier, Rates]:
    long = price.long_context
    if long is not None and prompt_tokens > long.above_input_tokens:
        return "long_context", long.rates
    return "standard", price.rates


def compute_charge(price: ModelPrice, usage: Usage) -> Charge:
    """The charge for `usage` at `price`, per the contract's table."""
    tier, r = _tier(price, usage.prompt_tokens)
    w5, w1 = usage.cache_write_5m, usage.cache_write_1h
    wanted = (
        ("input", usage.uncached_input_tokens, r.input),
        ("cached_input", usage.cached_tokens, _first(r.cached_input, r.input)),
        ("cache_write_5m", w5, _first(r.cache_write_5m, r.cache_write, r.input)),
        ("cache_write_1h", w1, _first(r.cache_write_1h, r.cache_write, r.input)),
        ("cache_write", usage.other_cache_write_tokens, _first(r.cache_write, r.cache_write_5m, r.input)),
        ("output", usage.completion_tokens, r.output),
    )
    lines: list[ChargeLine] = []
    total = ZERO
    for category, tokens, rate in wanted:
        if tokens:
            amount = tokens_cost(tokens, rate)
            total = EXACT.add(total, amount)
            lines.append(ChargeLine(category, tokens, rate, amount))
    return Charge(total, tier, tuple(lines))


def check_usage_limits(price: ModelPrice, usage: Usage, *, n: int, param_prefix: str = "usage") -> None:
    """Refuse usage the model cannot have produced: `ModelLimitExceeded` naming the field.

    P > `max_input_tokens`, or C > `max_output_tokens` x `n` (each of the n completions
    has the model's output limit). Counts equal to the limits are fine.
    """
    prefix = f"{param_prefix}." if param_prefix else ""
    if usage.prompt_tokens > price.max_input_tokens:
        raise ModelLimitExceeded(
            f"{prefix}prompt_tokens",
            f"{usage.prompt_tokens} is above the model's limit of {price.max_input_tokens} input tokens",
        )
    limit = price.max_output_tokens * n
    if usage.completion_tokens > limit:
        per = f" ({n} completions of {price.max_output_tokens})" if n > 1 else ""
        raise ModelLimitExceeded(
            f"{prefix}completion_tokens",
            f"{usage.completion_tokens} is above the model's limit of {limit} output tokens{per}",
        )


def _request_count(value: object, param: str, *, maximum: int) -> int:
    try:
        return as_count(value, minimum=1, maximum=maximum)
    except CountError as exc:
        raise ReservationInvalid(param, str(exc)) from None


def _highest_input_rate(rates: Rates) -> Decimal:
    return max(rate for c in INPUT_SIDE_CATEGORIES if (rate := rates.get(c)) is not None)


def size_reservation(
    price: ModelPrice,
    *,
    max_input_tokens: int | None,
    max_output_tokens: int | None,
    n: int | None,
) -> Reservation:
    """Size the hold for one request, per the contract's Reserving section.

    - A = the model's `max_input_tokens`, or the request's if given and smaller (a larger
      one is clamped to the model's, not refused);
    - O = the request's `max_output_tokens`, else the model's `default_output_tokens`, else
      its `max_output_tokens`; above the model's maximum is `ModelLimitExceeded` (param
      ``max_output_tokens``);
    - n completions, default 1, each with its own output allowance; above the model's
      `max_n` is `ModelLimitExceeded` (param ``n``);
    - a value that is not an integer or is < 1 is `ReservationInvalid` naming it.
    """
    a = price.max_input_tokens
    if max_input_tokens is not None:
        a = min(a, _request_count(max_input_tokens, "max_input_tokens", maximum=MAX_TOKENS))
    o = output_allowance(price)
    if max_output_tokens is not None:
        o = _request_count(max_output_tokens, "max_output_tokens", maximum=MAX_TOKENS)
        if o > price.max_output_tokens:
            raise ModelLimitExceeded(
                "max_output_tokens",
                f"{o} is above the model's limit of {price.max_output_tokens} output tokens",
            )
    completions = 1 if n is None else _request_count(n, "n", maximum=MAX_COMPLETIONS)
    check_completions(price, completions)

    tier: Tier = "standard"
    input_rate = _highest_input_rate(price.rates)
    output_rate = price.rates.output
    long = price.long_context
    if long is not None and a > long.above_input_tokens:
        tier = "long_context"
        input_rate = max(input_rate, _highest_input_rate(long.rates))
        output_rate = max(output_rate, long.rates.output)
    amount = EXACT.add(tokens_cost(a, input_rate), tokens_cost(o * completions, output_rate))
    return Reservation(a, o, completions, input_rate, output_rate, tier, amount)


# --- wire form -------------------------------------------------------------------------


def charge_to_builtins(charge: Charge) -> dict[str, Any]:
    """``{"amount", "tier", "lines": [{"category", "tokens", "rate", "amount"}]}``, decimals as strings."""
    return {
        "amount": format_amount(charge.amount),
        "tier": charge.tier,
        "lines": [
            {
                "category": line.category,
                "tokens": line.tokens,
                "rate": format_amount(line.rate),
                "amount": format_amount(line.amount),
            }
            for line in charge.lines
        ],
    }


def reservation_to_builtins(reservation: Reservation) -> dict[str, Any]:
    """``{"input_allowance", "output_allowance", "n", "input_rate", "output_rate", "tier", "amount"}``."""
    return {
        "input_allowance": reservation.input_allowance,
        "output_allowance": reservation.output_allowance,
        "n": reservation.n,
        "input_rate": format_amount(reservation.input_rate),
        "output_rate": format_amount(reservation.output_rate),
        "tier": reservation.tier,
        "amount": format_amount(reservation.amount),
    }


def _tier_of(value: object) -> Tier:
    if value == "standard":
        return "standard"
    if value == "long_context":
        return "long_context"
    raise ValueError(f"unknown tier {value!r}")


def charge_from_builtins(data: Mapping[str, Any]) -> Charge:
    """Inverse of `charge_to_builtins` (for charges read back from storage); exact."""
    lines = tuple(
        ChargeLine(
            str(line["category"]),
            as_count(line["tokens"]),
            parse_rate(line["rate"]),
            parse_amount(line["amount"]),
        )
        for line in data["lines"]
    )
    return Charge(parse_amount(data["amount"]), _tier_of(data["tier"]), lines)


def reservation_from_builtins(data: Mapping[str, Any]) -> Reservation:
    """Inverse of `reservation_to_builtins`; exact."""
    return Reservation(
        as_count(data["input_allowance"]),
        as_count(data["output_allowance"]),
        as_count(data["n"]),
        parse_rate(data["input_rate"]),
        parse_rate(data["output_rate"]),
        _tier_of(data["tier"]),
        parse_amount(data["amount"]),
    )
