"""Exact money for the whole project: parse, format and check amounts.

Invariants kept here:
- no float ever becomes an amount (floats and bools are refused outright);
- amounts are plain decimal strings on the wire ("0.000316", never "3.16E-4");
- the ledger is exact to 10^-12 of the currency unit and stores NUMERIC(38, 12),
  so an amount has at most 12 decimal places and 26 integer digits, and so must
  every balance an amount is added to (`check_storable`);
- arithmetic on amounts uses the EXACT context (80 digits), never Python's default
  28-digit context, which would round a 38-digit balance silently;
- rates are USD per 1,000,000 tokens with at most 6 decimal places, so
  tokens x rate / 10^6 has at most 12 places and needs no rounding.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, DivisionByZero, InvalidOperation, Overflow

AMOUNT_PLACES = 12
RATE_PLACES = 6
INTEGER_DIGITS = 26
QUANTUM = Decimal(1).scaleb(-AMOUNT_PLACES)
ZERO = Decimal(0)
TOKENS_PER_RATE_UNIT = 1_000_000

# Wide enough that no product or sum of ledger amounts is ever rounded.
EXACT = Context(prec=80, traps=[InvalidOperation, DivisionByZero, Overflow])

# Every stored amount and balance is NUMERIC(38, 12): its magnitude must stay below this.
STORABLE_LIMIT = Decimal(10) ** INTEGER_DIGITS

_PLAIN_DECIMAL = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$")


class AmountError(ValueError):
    """An amount or rate that is not an exact, plain, in-range decimal."""


def parse_decimal(value: object, *, places: int = AMOUNT_PLACES, what: str = "amount") -> Decimal:
    """Parse a wire value into an exact Decimal.

    Accepts a plain decimal string, an int or a Decimal. Refuses floats, bools,
    exponents, NaN/Infinity, whitespace, and more than `places` decimal places.
    """
    if isinstance(value, bool | float):
        raise AmountError(f"{what} must be a decimal string, not a JSON number")
    if isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise AmountError(f"{what} must be a finite decimal")
        result = value
    elif isinstance(value, str):
        if not _PLAIN_DECIMAL.match(value):
            raise AmountError(f'{what} must be a plain decimal string such as "10.50", got {value!r}')
        result = Decimal(value)
    else:
        raise AmountError(f"{what} must be a decimal string")
    exponent = result.as_tuple().exponent
    assert isinstance(exponent, int)
    if -exponent > places:
        raise AmountError(f"{what} has more than {places} decimal places")
    integer_digits = len(result.as_tuple().digits) + exponent
    if integer_digits > INTEGER_DIGITS:
        raise AmountError(f"{what} is too large")
    return result


def parse_amount(value: object, *, what: str = "amount") -> Decimal:
    """An amount of money: at most 12 decimal places."""
    return parse_decimal(value, places=AMOUNT_PLACES, what=what)


def parse_rate(value: object, *, what: str = "rate") -> Decimal:
    """A rate in currency per 1,000,000 tokens: non-negative, at most 6 places."""
    rate = parse_decimal(value, places=RATE_PLACES, what=what)
    if rate < 0:
        raise AmountError(f"{what} must not be negative")
    return rate


def format_amount(value: Decimal) -> str:
    """Plain decimal notation without trailing zeros or an exponent: "10.5", "0.000316", "0"."""
    if not value.is_finite():
        raise AmountError("cannot format a non-finite amount")
    if value == 0:
        return "0"
    text = format(value.normalize(EXACT), "f")
    return text


def tokens_cost(tokens: int, rate: Decimal) -> Decimal:
    """tokens x rate / 1,000,000, exactly (a rate has <= 6 places, so <= 12 places result)."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise AmountError("token count must be a non-negative integer")
    product = EXACT.multiply(Decimal(tokens), rate)
    cost = EXACT.divide(product, Decimal(TOKENS_PER_RATE_UNIT))
    if cost != cost.quantize(QUANTUM, context=EXACT):
        raise AmountError("cost is not exact at 10^-12; the rate has too many decimal places")
    return cost


def storable(value: Decimal) -> bool:
    """Whether a balance (or any amount) fits NUMERIC(38, 12): |value| < 10^26."""
    return value.copy_abs() < STORABLE_LIMIT  # abs() would round to the 28-digit context


def check_storable(value: Decimal, *, what: str = "amount") -> Decimal:
    """Refuse a resulting balance or sum that the ledger could not store."""
    if not storable(value):
        raise AmountError(f"{what} would be {format_amount(value)}, beyond the ledger's range (|x| < 10^26)")
    return value


def add(*values: Decimal) -> Decimal:
    """Exact sum of amounts."""
    total = ZERO
    for v in values:
        total = EXACT.add(total, v)
    return total
