"""What the ledger refused, as exceptions: one `LedgerError` carrying the contract's error shape.

Every refusal the service answers with is `{"error": {"type", "code", "message", "param", ...}}`;
`LedgerError` keeps each of those and the whole body (`body`). A 402 becomes
`InsufficientFunds`, whose `required` and `available` are `Decimal` (never float), so a
gateway can lower its output limit and try again; a 402 `budget_exceeded` (the reserve's
`budget_key` is past its budget) is its subclass `BudgetExceeded`, whose `available` is what
the budget still allows this period (`budget` - `spent` - `held`, never below 0). A 410
`model_retired` is `ModelRetired`, with the model's `retires_at`. When the
ledger cannot be reached at all (after the retries), the error is `LedgerUnavailable`, with
the transport error as its cause.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any


class LedgerError(Exception):
    """A refusal by the ledger: HTTP `status`, the contract's `code`, `type`, `message` and `param`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.type = type or code
        self.param = param
        self.body: dict[str, Any] = body or {}
        detail = self.body.get("error")
        self._read(detail if isinstance(detail, dict) else {})

    def _read(self, detail: dict[str, Any]) -> None:
        """Take what a subclass adds from the body's `error` object (nothing here)."""


class InsufficientFunds(LedgerError):
    """402: the reservation exceeds the account's available credit; nothing was held."""

    def _read(self, detail: dict[str, Any]) -> None:
        self.required = Decimal(str(detail.get("required", "0")))
        self.available = Decimal(str(detail.get("available", "0")))
        self.currency: str | None = detail.get("currency")
        self.reservation: dict[str, Any] = detail.get("reservation") or {}
        # the account's price plan that sized it ({"id", "revision"}), None at list rates
        self.plan: dict[str, Any] | None = detail.get("plan")


class BudgetExceeded(InsufficientFunds):
    """402 `budget_exceeded`: the reservation would take its `budget_key` past the key's budget
    for the current period (`period_start` to `period_end`, ISO dates); nothing was held."""

    def _read(self, detail: dict[str, Any]) -> None:
        super()._read(detail)
        self.budget_key: str | None = detail.get("budget_key")
        self.budget = Decimal(str(detail.get("budget", "0")))
        self.spent = Decimal(str(detail.get("spent", "0")))
        self.held = Decimal(str(detail.get("held", "0")))
        self.available = max(Decimal(0), self.budget - self.spent - self.held)  # as the budget's `remaining`
        self.period_start: str | None = detail.get("period_start")
        self.period_end: str | None = detail.get("period_end")


class ModelRetired(LedgerError):
    """410 `model_retired`: the model is past its `retires_at` (an aware `datetime`, or None if
    the body lacks it); nothing was held. Holds reserved before still settle and release."""

    def _read(self, detail: dict[str, Any]) -> None:
        when = detail.get("retires_at")
        self.retires_at: datetime | None = (
            datetime.fromisoformat(str(when).replace("Z", "+00:00")) if when else None
        )


class LedgerUnavailable(LedgerError):
    """The ledger could not be reached, or kept answering 503, within the retry budget."""


def error_from_response(status: int, body: Any) -> LedgerError:
    """The exception for a non-2xx answer (a body that is not the contract's shape is kept as text)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        return LedgerError(status, "unexpected_response", f"HTTP {status}: {str(body)[:200]}")
    code = str(detail.get("code", "unknown"))
    kind: type[LedgerError] = LedgerError
    if status == 402:
        kind = BudgetExceeded if code == "budget_exceeded" else InsufficientFunds
    elif status == 410 and code == "model_retired":
        kind = ModelRetired
    elif status == 503:
        kind = LedgerUnavailable
    return kind(
        status,
        code,
        str(detail.get("message", "")),
        type=detail.get("type"),
        param=detail.get("param"),
        body=body,
    )
