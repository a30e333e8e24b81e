"""The ledger's money rules on top of `pricing.money`: parse a request's amount, and what is available.

Invariants:
- an amount in a request is read by `parse_money` only: a plain decimal
  string with at most 12 places and 26 integer digits (`pricing.money.parse_amount`),
  never a float; anything else is a 422 `validation_error` naming the parameter;
- arithmetic on amounts and balances uses the EXACT context, never Python's default
  28-digit context, which would round a 38-digit balance silently;
- a movement never takes a balance outside NUMERIC(38, 12) (`check_resulting_balance`):
  the refusal is a 422 naming the amount, not a database error.
"""

from __future__ import annotations

from decimal import Decimal

from ledger.errors import ValidationFailed
from pricing.money import EXACT, AmountError, check_storable, parse_amount


def parse_money(value: str, *, param: str) -> Decimal:
    """An amount of money from a request (`param` names it in the 422)."""
    try:
        return parse_amount(value, what=param)
    except AmountError as error:
        raise ValidationFailed(str(error), param=param) from error


def available_of(
    balance: Decimal, credit_limit: Decimal, held: Decimal, lapsed: Decimal = Decimal(0)
) -> Decimal:
    """balance - lapsed + credit_limit - held, exactly (a 38-digit balance exceeds the default
    28-digit context). `lapsed`: what expired grants still hold until the expiry job posts it
    out (migration 0020); from `expires_at` on it pays for nothing."""
    return EXACT.subtract(EXACT.add(EXACT.subtract(balance, lapsed), credit_limit), held)


def check_resulting_balance(balance: Decimal, amount: Decimal, *, param: str = "amount") -> None:
    """Refuse (422 naming `param`) an amount that would take `balance` out of NUMERIC(38, 12).

    The caller holds the account row's lock, so nothing else moves the balance until commit.
    """
    try:
        check_storable(EXACT.add(balance, amount), what="the resulting balance")
    except AmountError as error:
        raise ValidationFailed(str(error), param=param) from error
