"""What every console page shares: the page and error templates, service look-ups, periods.

A page is rendered with the logged-in principal, the session's CSRF token and whether
the role may move money (`finance` and up). Errors (a domain refusal, a 404, a bad
query) are rendered as the error page with the contract's status and code; a missing
session redirects to the login page. Periods typed in the console are UTC days, both
ends inclusive: `from` 2026-12-01 `to` 2026-12-31 is [2026-12-01, 2027-01-01).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

import structlog
from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.params import Parameter
from litestar.response import Redirect, Template
from litestar.types import ExceptionHandlersMap

from ledger.accounts.service import AccountService
from ledger.console.auth import LoginRequired, csrf_of, login_url, may
from ledger.errors import LedgerError, ServiceUnavailable, ValidationFailed
from ledger.grants.service import GrantService
from ledger.holds.service import HoldService
from ledger.http.auth import Principal
from ledger.http.errors import handle_exception, translate
from ledger.http.middleware import CLIENT_GONE
from ledger.prices.service import PriceService
from ledger.reports.service import ReportService

log = structlog.get_logger(__name__)

PAGE = 50
Day = Annotated[str | None, Parameter(default=None, max_length=10)]
FromDay = Annotated[str | None, Parameter(query="from", default=None, max_length=10)]
ToDay = Annotated[str | None, Parameter(query="to", default=None, max_length=10)]


def error_page(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, LoginRequired):
        return Redirect(login_url(exc.target), status_code=303)
    if request.scope["state"].get(CLIENT_GONE):  # hung up mid-body: 499 at info, as on the API
        return handle_exception(request, exc)
    error = translate(exc)
    if isinstance(error, ServiceUnavailable):  # an outage: one warning line, as on the API
        log.warning("console.unavailable", code=error.code, path=request.url.path)
    elif error.status >= 500:
        log.error("console.failed", code=error.code, path=request.url.path, exc_info=exc)
    principal = request.state.get("principal")
    return Template(
        template_name="error.html",
        context={"error": error, "user": principal, "csrf": csrf_or_none(request)},
        status_code=error.status,
    )


def csrf_or_none(request: Request[Any, Any, Any]) -> str | None:
    return csrf_of(request) if request.state.get("console_session") else None


HANDLERS: ExceptionHandlersMap = {
    LoginRequired: error_page,
    LedgerError: error_page,
    HTTPException: error_page,
}


def page(request: Request[Any, Any, Any], name: str, status: int = 200, **context: Any) -> Template:
    principal: Principal = request.state.principal
    context.update(user=principal, csrf=csrf_of(request), can_move=may(principal, "finance"))
    return Template(template_name=name, context=context, status_code=status)


def day(text: str | None, *, param: str) -> date | None:
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError as error:
        raise ValidationFailed(f"{param} is not a day (YYYY-MM-DD)", param=param) from error


def period(start: str | None, end: str | None) -> tuple[datetime | None, datetime | None]:
    """[from 00:00 UTC, the day after `to` 00:00 UTC): both typed days are included."""
    first, last = day(start, param="from"), day(end, param="to")
    if first and last and first > last:
        raise ValidationFailed("'from' must not be after 'to'", param="from")
    since = datetime(first.year, first.month, first.day, tzinfo=UTC) if first else None
    until = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1) if last else None
    return since, until


def accounts_of(request: Request[Any, Any, Any]) -> AccountService:
    svc: AccountService = request.app.state.accounts
    return svc


def holds_of(request: Request[Any, Any, Any]) -> HoldService:
    svc: HoldService = request.app.state.holds
    return svc


def prices_of(request: Request[Any, Any, Any]) -> PriceService:
    svc: PriceService = request.app.state.prices
    return svc


def grants_of(request: Request[Any, Any, Any]) -> GrantService:
    svc: GrantService = request.app.state.grants
    return svc


def reports_of(request: Request[Any, Any, Any]) -> ReportService:
    svc: ReportService = request.app.state.reports
    return svc
