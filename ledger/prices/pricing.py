"""The pure cost engine (`pricing`) as the ledger uses it: its refusals become ledger errors here.

`translate_pricing_error` is the one place an engine refusal (`pricing.errors`) is
mapped onto the ledger's error tree, so a bad usage, a limit exceeded or a model
without a price answers the same status and code from a quote, a reserve or a settle:
- `UsageInvalid` -> 422 `usage_invalid` (param `usage` unless the engine names one);
- `ModelLimitExceeded` -> 422 `model_limit_exceeded`;
- `PriceDocumentInvalid` -> 422 `validation_error` (a refused price document);
- any other `PricingInputError` -> 422 `validation_error`;
- `ModelNotPriced` -> 503 `pricing_unavailable`;
- `ModelRetired` -> 410 `model_retired` (param `model`, `retires_at` in the error object).
Anything else is returned unchanged. `usage_of`, `size`, `charge_usage`, `charge` and
`check_retirement` call the engine through it; nothing else in the service catches an
engine refusal.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.errors import (
    ModelLimitExceeded,
    ModelRetired,
    PriceDocumentRefused,
    PricingUnavailable,
    UsageInvalid,
    ValidationFailed,
)
from pricing import errors as pricing_errors
from pricing.catalogue import check_not_retired, format_timestamp
from pricing.document import ModelPrice
from pricing.engine import Charge, Reservation, check_usage_limits, compute_charge, size_reservation
from pricing.usage import Usage, parse_usage


def translate_pricing_error(error: Exception, *, param: str = "usage") -> Exception:
    """Map the pure engine's refusals onto the ledger's error tree (`param`: what a usage
    refusal names when the engine names nothing)."""
    if isinstance(error, pricing_errors.UsageInvalid):
        return UsageInvalid(error.message, param=error.param or param)
    if isinstance(error, pricing_errors.ModelLimitExceeded):
        return ModelLimitExceeded(error.message, param=error.param)
    if isinstance(error, pricing_errors.PriceDocumentInvalid):
        return PriceDocumentRefused(error.message, param=error.param or None)
    if isinstance(error, pricing_errors.PricingInputError):
        return ValidationFailed(error.message, param=error.param or None)
    if isinstance(error, pricing_errors.ModelNotPriced):
        return PricingUnavailable(
            f"no valid price for model {error.model!r} in the selected price version", param="model"
        )
    if isinstance(error, pricing_errors.ModelRetired):
        retires_at = format_timestamp(error.retires_at)
        return ModelRetired(error.message, param="model", extra={"retires_at": retires_at})
    return error


def check_retirement(price: ModelPrice, now: datetime) -> None:
    """Refuse a new reserve or quote for a model retired at `now` (410 `model_retired`)."""
    try:
        check_not_retired(price, now)
    except pricing_errors.ModelRetired as error:
        raise translate_pricing_error(error) from error


def size(price: ModelPrice, max_input: int | None, max_output: int | None, n: int | None) -> Reservation:
    """Size a reservation as a reserve would; the engine's refusals become ledger errors."""
    try:
        return size_reservation(price, max_input_tokens=max_input, max_output_tokens=max_output, n=n)
    except pricing_errors.PricingInputError as error:
        raise translate_pricing_error(error) from error


def usage_of(raw: dict[str, Any], *, param: str = "usage") -> Usage:
    """A request's usage object, validated (`param`: where it sits in the request)."""
    try:
        return parse_usage(raw, param_prefix=param)
    except pricing_errors.PricingInputError as error:
        raise translate_pricing_error(error, param=param) from error


def charge_usage(price: ModelPrice, usage: Usage, n: int, *, limits: bool = True) -> Charge:
    """What `usage` costs at `price`; with `limits`, refused above the model's limits (the
    completion limit is n x the model's output) as a settle refuses it."""
    try:
        if limits:
            check_usage_limits(price, usage, n=n)
        return compute_charge(price, usage)
    except pricing_errors.PricingInputError as error:
        raise translate_pricing_error(error) from error


def check_limits(price: ModelPrice, usage: Usage, n: int) -> None:
    """Refuse usage above the model's limits (a checkpoint or interrupt records no charge)."""
    try:
        check_usage_limits(price, usage, n=n)
    except pricing_errors.PricingInputError as error:
        raise translate_pricing_error(error) from error


def charge(price: ModelPrice, usage: dict[str, Any], n: int) -> Charge:
    """What a raw `usage` object costs at `price`, refused as a settle would refuse it."""
    return charge_usage(price, usage_of(usage), n)
