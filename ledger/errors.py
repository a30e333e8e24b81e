"""The domain error tree: every refusal the service can give, with its status and code.

Services raise these; one exception handler (`ledger.http.errors`) turns each into
the contract's single error shape. A refused request changes nothing: services
raise before they commit, and the transaction is rolled back.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LedgerError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    type: ClassVar[str] = "internal_error"

    def __init__(
        self, message: str, *, param: str | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.extra = extra or {}


class InvalidJson(LedgerError):
    status, code, type = 400, "invalid_json", "invalid_request"


class Unauthorized(LedgerError):
    status, code, type = 401, "unauthorized", "authentication_error"


class Forbidden(LedgerError):
    status, code, type = 403, "forbidden", "permission_error"


class AccountFrozen(Forbidden):
    """The account is frozen: it takes no new reservations (settles, releases, deposits still apply)."""

    code = "account_frozen"


class InsufficientFunds(LedgerError):
    status, code, type = 402, "insufficient_funds", "insufficient_funds"


class BudgetExceeded(LedgerError):
    """The reserve would take its budget key's period spend plus open holds past the budget."""

    status, code, type = 402, "budget_exceeded", "budget_exceeded"


class NotFound(LedgerError):
    status, code, type = 404, "not_found", "not_found"


class AccountNotFound(NotFound):
    code = "account_not_found"


class PlanNotFound(NotFound):
    code = "plan_not_found"


class HoldNotFound(NotFound):
    code = "hold_not_found"


class BudgetNotFound(NotFound):
    code = "budget_not_found"


class PriceVersionNotFound(NotFound):
    code = "price_version_not_found"


class ModelNotFound(NotFound):
    """The model is in no price version of the currency: the caller's mistake, not an outage."""

    code = "model_not_found"


class ReconciliationRunNotFound(NotFound):
    code = "reconciliation_run_not_found"


class AlertNotFound(NotFound):
    code = "alert_not_found"


class RouteNotFound(NotFound):
    code = "route_not_found"


class MethodNotAllowed(LedgerError):
    status, code, type = 405, "method_not_allowed", "invalid_request"


class ClientDisconnected(LedgerError):
    """The client hung up before its request body was complete: nobody is left to answer.

    Counted and logged with nginx's 499 ("client closed request"), never as a 5xx.
    """

    status, code, type = 499, "client_disconnected", "invalid_request"


class ModelRetired(LedgerError):
    """The model is past the `retires_at` its price version gives: no new reserve or quote.
    The error object adds `retires_at`; holds reserved before still settle and release."""

    status, code, type = 410, "model_retired", "invalid_request"


class PayloadTooLarge(LedgerError):
    status, code, type = 413, "payload_too_large", "invalid_request"


class UnsupportedMediaType(LedgerError):
    status, code, type = 415, "unsupported_media_type", "invalid_request"


class Conflict(LedgerError):
    status, code, type = 409, "conflict", "conflict"


class IdempotencyConflict(Conflict):
    code = "idempotency_conflict"


class HoldStateConflict(Conflict):
    code = "hold_state_conflict"


class AccountExists(Conflict):
    code = "account_exists"


class PlanExists(Conflict):
    code = "plan_exists"


class ValidationFailed(LedgerError):
    status, code, type = 422, "validation_error", "invalid_request"


class UsageInvalid(ValidationFailed):
    code = "usage_invalid"


class ModelLimitExceeded(ValidationFailed):
    code = "model_limit_exceeded"


class PriceVersionNotEffective(ValidationFailed):
    """The request pins a price version whose effective_at is still in the future."""

    code = "price_version_not_effective"


class PriceVersionSuperseded(ValidationFailed):
    """The request pins a price version superseded longer ago than the pin grace."""

    code = "price_version_superseded"


class PriceDocumentRefused(ValidationFailed):
    code = "validation_error"


class TooManyRequests(LedgerError):
    """Too many failed authentications from this client address: wait `retry_after` seconds."""

    status, code, type = 429, "rate_limited", "rate_limit_error"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServiceUnavailable(LedgerError):
    status, code, type = 503, "service_unavailable", "service_unavailable"


class PricingUnavailable(ServiceUnavailable):
    code = "pricing_unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    code = "database_unavailable"


class DatabaseDegraded(ServiceUnavailable):
    """The primary has no synchronous standby and LEDGER_REQUIRE_SYNC_STANDBY is on (ledger.replication)."""

    code = "database_degraded"
