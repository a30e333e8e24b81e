"""What the ledger refused, as exceptions: one `LedgerError` carrying the contract's error shape.

Every refusal the service answers with is `{"error": {"type", "code", "message", "param", ...}}`;
`LedgerError` keeps each of those and the whole body (`body`). A 402 becomes
`InsufficientFunds`, whose `required` and `available` are `Decimal` (never float), so a
gateway can lower its output limit and try again. When the ledger cannot be reached at all
(after the retries), the error is `LedgerUnavailable`, with the transport error as its cause.
"""

from __future__ import annotations

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


class InsufficientFunds(LedgerError):
    """402: the reservation exceeds the account's available credit; nothing was held."""

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
        super().__init__(status, code, message, type=type, param=param, body=body)
        detail = (body or {}).get("error", {})
        self.required = Decimal(str(detail.get("required", "0")))
        self.available = Decimal(str(detail.get("available", "0")))
        self.currency: str | None = detail.get("currency")
        self.reservation: dict[str, Any] = detail.get("reservation") or {}


class LedgerUnavailable(LedgerError):
    """The ledger could not be reached, or kept answering 503, within the retry budget."""


def error_from_response(status: int, body: Any) -> LedgerError:
    """The exception for a non-2xx answer (a body that is not the contract's shape is kept as text)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        return LedgerError(status, "unexpected_response", f"HTTP {status}: {str(body)[:200]}")
    kind = InsufficientFunds if status == 402 else LedgerUnavailable if status == 503 else LedgerError
    return kind(
        status,
        str(detail.get("code", "unknown")),
        str(detail.get("message", "")),
        type=detail.get("type"),
        param=detail.get("param"),
        body=body,
    )
