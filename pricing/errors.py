"""The pricing engine's refusals: each names the offending field in `param`.

Invariants kept here:
- every refusal of caller input is a `ValueError` subclass carrying `param` (a dotted /
  bracket path such as ``models[1].rates.input`` or ``usage.prompt_tokens``), the bare
  reason `detail` and a human `message` naming both; an empty `param` means the input
  as a whole (e.g. not JSON at all);
- `ModelNotPriced` is a `LookupError`, not a `ValueError`: the input was fine, the price
  document simply has no row for the model. The ledger answers 503 ``pricing_unavailable``
  for a model it knows (priced in some version, or deliberately left unpriced) and 404
  ``model_not_found`` for one it has never heard of. `ModelRetired` is a `LookupError`
  too: the model was priced but is past its `retires_at` (410 ``model_retired``).

`pricing` imports nothing from `ledger`; the ledger maps these onto its own error tree
(422 ``validation_error`` / ``usage_invalid`` / ``model_limit_exceeded``, 503).
"""

from __future__ import annotations

from datetime import UTC, datetime


class PricingInputError(ValueError):
    """Base of the refusals that name a field.

    `param` says where, `detail` says why, and `message` is the whole sentence for a
    person (``"models[0].rates.input: rate must not be negative"``), so an API error
    body that shows only the message still names the field.
    """

    def __init__(self, param: str, detail: str) -> None:
        self.param = param
        self.detail = detail
        self.message = f"{param}: {detail}" if param else detail
        super().__init__(self.message)


class PriceDocumentInvalid(PricingInputError):
    """A price document that must not be published (422 ``validation_error``)."""


class UsageInvalid(PricingInputError):
    """A usage object that cannot be charged as sent (422 ``usage_invalid``)."""


class ModelLimitExceeded(PricingInputError):
    """A request asks for more than the model allows (422 ``model_limit_exceeded``)."""


class ReservationInvalid(PricingInputError):
    """Reservation fields that are not usable numbers: < 1, not an integer (422 ``validation_error``)."""


class ModelRetired(LookupError):
    """The model was retired at `retires_at` (its price document says so): no new
    reservation or quote (the ledger answers 410 ``model_retired``)."""

    def __init__(self, model: str, retires_at: datetime) -> None:
        self.model = model
        self.retires_at = retires_at
        when = retires_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        self.message = f"model {model!r} was retired at {when}; it takes no new requests"
        super().__init__(self.message)


class ModelNotPriced(LookupError):
    """The price document has no price for `model` (the ledger decides 503 or 404)."""

    def __init__(self, model: str, message: str | None = None) -> None:
        self.model = model
        self.message = message or f"no price for model {model!r} in this price version"
        super().__init__(self.message)
