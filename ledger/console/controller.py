"""The finance console: server-rendered pages over the same services the admin API uses.

Pages never call the service over HTTP: they use `request.app.state.accounts`, `.holds`,
`.prices`, `.reconciliation` and the integrity check directly, with the console user's
`Actor`, so a deposit made here is posted, idempotency-checked and audit-logged exactly
as `POST /admin/v1/accounts/{id}/deposits` would do it. Every money form carries a CSRF
token and an idempotency key generated when the form was rendered: submitting one form
twice replays the first movement instead of posting a second. Amounts are the services'
decimal strings, shown as they are; nothing here does arithmetic on money.
"""

from __future__ import annotations

import hmac
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import structlog
from litestar import Controller, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import Parameter
from litestar.response import Redirect, Stream, Template
from litestar.types import ExceptionHandlersMap

from ledger.accounts.schemas import AdjustmentRequest, DepositRequest
from ledger.accounts.service import AccountService, account_view
from ledger.console import repository, sessions
from ledger.console.auth import (
    LoginRequired,
    checked_form,
    console_guard,
    csrf_of,
    keys_of,
    login_url,
    may,
    safe_next,
)
from ledger.console.headers import console_headers
from ledger.console.session import (
    COOKIE_PATH,
    LOGIN_COOKIE,
    LOGIN_NONCE_SECONDS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    login_nonce,
)
from ledger.db import read_only
from ledger.errors import LedgerError, ValidationFailed
from ledger.holds.service import HoldService
from ledger.http.auth import Principal, TokenRegistry
from ledger.http.body import validation_param
from ledger.http.errors import translate
from ledger.http.query import Cursor
from ledger.http.request import actor_of
from ledger.http.throttle import AuthThrottle, record_failure, refuse_if_blocked
from ledger.integrity import service as integrity
from ledger.prices.service import PriceService
from ledger.reconciliation.service import ReconciliationService
from ledger.reports.service import ReportService
from pricing.diff import compare_documents, diff_to_builtins

log = structlog.get_logger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
HoldState = Literal["open", "interrupted", "settled", "released"]
Search = Annotated[str, Parameter(default="", max_length=128)]
PAGE = 50


def _secure(request: Request[Any, Any, Any]) -> bool:
    """`LEDGER_CONSOLE_SECURE_COOKIE`: on outside embedded mode, off in embedded (http) mode."""
    secure: bool = request.app.state.settings.console_secure_cookie
    return secure


def _error_page(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, LoginRequired):
        return Redirect(login_url(exc.target), status_code=303)
    error = translate(exc)
    if error.status >= 500:
        log.error("console.failed", code=error.code, path=request.url.path, exc_info=exc)
    principal = request.state.get("principal")
    return Template(
        template_name="error.html",
        context={"error": error, "user": principal, "csrf": _csrf_or_none(request)},
        status_code=error.status,
    )


def _csrf_or_none(request: Request[Any, Any, Any]) -> str | None:
    return csrf_of(request) if request.state.get("console_session") else None


HANDLERS: ExceptionHandlersMap = {
    LoginRequired: _error_page,
    LedgerError: _error_page,
    HTTPException: _error_page,
}


def _page(request: Request[Any, Any, Any], name: str, status: int = 200, **context: Any) -> Template:
    principal: Principal = request.state.principal
    context.update(user=principal, csrf=csrf_of(request), can_move=may(principal, "finance"))
    return Template(template_name=name, context=context, status_code=status)


def _login_page(
    request: Request[Any, Any, Any], *, target: str, message: str | None = None, status: int = 200
) -> Template:
    nonce = login_nonce()
    page = Template(
        template_name="login.html",
        context={"nonce": nonce, "next": target, "message": message, "user": None},
        status_code=status,
    )
    page.set_cookie(
        LOGIN_COOKIE,
        nonce,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        max_age=LOGIN_NONCE_SECONDS,
    )
    return page


def accounts_of(request: Request[Any, Any, Any]) -> AccountService:
    svc: AccountService = request.app.state.accounts
    return svc


def holds_of(request: Request[Any, Any, Any]) -> HoldService:
    svc: HoldService = request.app.state.holds
    return svc


def prices_of(request: Request[Any, Any, Any]) -> PriceService:
    svc: PriceService = request.app.state.prices
    return svc


class ConsoleLoginController(Controller):
    """Login, logout and the stylesheet: the routes that work without a session."""

    path = "/console"
    include_in_schema = False
    exception_handlers = HANDLERS
    middleware = [console_headers]
    opt = {"body": "form"}  # HTML forms: the admission check takes form bodies here

    @get("/login")
    async def login_form(self, request: Request[Any, Any, Any], next: Cursor = None) -> Template:
        return _login_page(request, target=safe_next(next))

    @post("/login", status_code=303)
    async def login(self, request: Request[Any, Any, Any]) -> Response[Any]:
        form = await request.form()
        target = safe_next(form.get("next"))
        expected = request.cookies.get(LOGIN_COOKIE)
        if not expected or not hmac.compare_digest(expected, str(form.get("nonce") or "")):
            return _login_page(
                request, target=target, message="The login form expired; try again.", status=403
            )
        throttle: AuthThrottle = request.app.state.auth_throttle
        refuse_if_blocked(throttle, request.scope)
        registry: TokenRegistry = request.app.state.tokens
        principal = registry.lookup(str(form.get("token") or "").strip())
        if principal is None or principal.fingerprint not in keys_of(request).principals:
            record_failure(throttle, request.scope)
            log.warning("console.login_refused")
            return _login_page(
                request, target=target, message="That is not an admin token of this ledger.", status=401
            )
        cookie, session = keys_of(request).issue(principal)
        await sessions.open_session(request.app.state.engine, session, principal.identity)
        log.info("console.login", actor=principal.identity)
        response: Response[Any] = Redirect(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            cookie,
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
            secure=_secure(request),
            max_age=SESSION_SECONDS,
        )
        response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)
        return response

    @post("/logout", status_code=303)
    async def logout(self, request: Request[Any, Any, Any]) -> Response[Any]:
        found = keys_of(request).read(request.cookies.get(SESSION_COOKIE))
        form = await request.form()
        if found is not None:
            if not keys_of(request).csrf_ok(found[0].nonce, form.get("csrf_token")):
                return Redirect("/console/accounts", status_code=303)
            # On the server: a copy of the cookie stops working too, in every process.
            await sessions.revoke(request.app.state.engine, found[0].nonce)
        response: Response[Any] = Redirect("/console/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)
        return response

    @get("/static/console.css", media_type="text/css")
    async def stylesheet(self) -> Response[bytes]:
        return Response(
            (STATIC / "console.css").read_bytes(),
            media_type="text/css",
            headers={"Cache-Control": "max-age=3600"},
        )


class ConsoleController(Controller):
    path = "/console"
    guards = [console_guard]
    include_in_schema = False
    exception_handlers = HANDLERS
    middleware = [console_headers]
    opt = {"body": "form"}  # HTML forms: the admission check takes form bodies here

    @get("/")
    async def home(self) -> Redirect:
        return Redirect("/console/accounts", status_code=303)

    # --- accounts --------------------------------------------------------------

    @get("/accounts")
    async def accounts(self, request: Request[Any, Any, Any], q: Search, cursor: Cursor) -> Template:
        query = q.strip()
        async with read_only(accounts_of(request).engine) as conn:
            rows = await repository.search(conn, query=query, after=cursor or "", limit=PAGE + 1)
        more = len(rows) > PAGE
        rows = rows[:PAGE]
        return _page(
            request,
            "accounts.html",
            accounts=[account_view(r) for r in rows],
            q=query,
            next_cursor=rows[-1].id if more and rows else None,
        )

    @get("/accounts/{account_id:str}")
    async def account(self, request: Request[Any, Any, Any], account_id: str) -> Template:
        return await self._account_page(request, account_id)

    async def _account_page(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        *,
        notice: tuple[str, str] | None = None,
        status: int = 200,
        values: dict[str, str] | None = None,
    ) -> Template:
        account = await accounts_of(request).get(account_id)
        unresolved = []
        for state in ("open", "interrupted"):
            held, _ = await holds_of(request).page(
                state=state, account_id=account_id, older_than=None, cursor=None, limit=PAGE
            )
            unresolved.extend(held)
        recent = await accounts_of(request).journal(account_id, cursor=None, limit=10)
        return _page(
            request,
            "account.html",
            status,
            account=account,
            holds=unresolved,
            recent=recent.data,
            notice=notice,
            values=values or {},
            # A fresh key per render: the same rendered form submitted twice is one movement.
            deposit_key=f"console-{uuid.uuid4().hex}",
            adjust_key=f"console-{uuid.uuid4().hex}",
        )

    @get("/accounts/{account_id:str}/statement")
    async def statement(self, request: Request[Any, Any, Any], account_id: str, cursor: Cursor) -> Template:
        account = await accounts_of(request).get(account_id)
        page = await accounts_of(request).journal(account_id, cursor=cursor, limit=PAGE)
        return _page(
            request,
            "statement.html",
            account=account,
            rows=page.data,
            next_cursor=page.next_cursor,
            first_page=cursor is None,
        )

    @get("/accounts/{account_id:str}/statement.csv")
    async def statement_csv(self, request: Request[Any, Any, Any], account_id: str) -> Stream:
        """The admin API's statement CSV (the whole history), streamed: one format for both."""
        reports: ReportService = request.app.state.reports
        await reports.check_statement(account_id, None, None)
        return Stream(
            reports.statement_csv(account_id, None, None),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="statement-{account_id}.csv"'},
        )

    @post("/accounts/{account_id:str}/deposits", opt={"role": "finance"}, status_code=200)
    async def deposit(self, request: Request[Any, Any, Any], account_id: str) -> Template:
        return await self._move(request, account_id, "deposit")

    @post("/accounts/{account_id:str}/adjustments", opt={"role": "finance"}, status_code=200)
    async def adjust(self, request: Request[Any, Any, Any], account_id: str) -> Template:
        return await self._move(request, account_id, "adjustment")

    async def _move(self, request: Request[Any, Any, Any], account_id: str, kind: str) -> Template:
        form = await checked_form(request)
        values = {
            "kind": kind,
            "amount": str(form.get("amount") or "").strip(),
            "reason": str(form.get("reason") or "").strip(),
        }
        key = str(form.get("idempotency_key") or "")
        try:
            if not values["reason"]:
                raise ValidationFailed("a reason is required", param="reason")
            accounts = accounts_of(request)
            fields = {"idempotency_key": key, "amount": values["amount"]}
            try:
                if kind == "deposit":
                    body = msgspec.convert({**fields, "reference": values["reason"]}, DepositRequest)
                    movement, created = await accounts.deposit(account_id, body, actor_of(request))
                else:
                    adjustment = msgspec.convert({**fields, "reason": values["reason"]}, AdjustmentRequest)
                    movement, created = await accounts.adjust(account_id, adjustment, actor_of(request))
            except msgspec.ValidationError as error:
                param, message = validation_param(str(error))
                raise ValidationFailed(message, param=param) from error
        except LedgerError as error:
            if error.status >= 500 or error.status == 404:
                raise
            return await self._account_page(
                request, account_id, notice=("error", error.message), status=error.status, values=values
            )
        if created:
            text = (
                f"{kind.capitalize()} of {movement.amount} {movement.currency} posted "
                f"(transaction {movement.transaction_id}); balance now {movement.balance}."
            )
        else:
            text = (
                f"This form was already submitted: {kind} {movement.transaction_id} of "
                f"{movement.amount} {movement.currency} stands, nothing was posted twice."
            )
        return await self._account_page(request, account_id, notice=("ok", text))

    # --- holds, reconciliation, integrity ---------------------------------------

    @get("/holds")
    async def holds(
        self,
        request: Request[Any, Any, Any],
        hold_state: Annotated[HoldState | None, Parameter(query="state", default=None)],
        account_id: Annotated[str | None, Parameter(default=None, max_length=128)],
        cursor: Cursor,
    ) -> Template:
        rows, next_cursor = await holds_of(request).page(
            state=hold_state, account_id=account_id or None, older_than=None, cursor=cursor, limit=PAGE
        )
        return _page(
            request,
            "holds.html",
            holds=rows,
            state=hold_state,
            account_id=account_id or "",
            next_cursor=next_cursor,
        )

    @get("/reconciliation")
    async def reconciliation(self, request: Request[Any, Any, Any], cursor: Cursor) -> Template:
        svc: ReconciliationService = request.app.state.reconciliation
        runs, next_cursor = await svc.list(cursor=cursor, limit=20)
        return _page(request, "reconciliation.html", runs=runs, next_cursor=next_cursor)

    @get("/integrity")
    async def integrity(self, request: Request[Any, Any, Any]) -> Template:
        report = await integrity.check(request.app.state.engine)
        return _page(request, "integrity.html", report=report)

    # --- prices ----------------------------------------------------------------

    @get("/prices")
    async def prices(self, request: Request[Any, Any, Any], cursor: Cursor) -> Template:
        versions, next_cursor = await prices_of(request).list(cursor=cursor, limit=PAGE)
        # "diff with previous": the next older version of the same currency on this page.
        previous: dict[str, str] = {}
        for i, version in enumerate(versions):
            older = next((v for v in versions[i + 1 :] if v.currency == version.currency), None)
            if older is not None:
                previous[version.version] = older.version
        return _page(request, "prices.html", versions=versions, previous=previous, next_cursor=next_cursor)

    @get("/prices/diff")
    async def price_diff(
        self,
        request: Request[Any, Any, Any],
        old: Annotated[str, Parameter(max_length=40)],
        new: Annotated[str, Parameter(max_length=40)],
    ) -> Template:
        svc = prices_of(request)
        async with read_only(svc.engine) as conn:
            before = await svc.document(conn, old)
            after = await svc.document(conn, new)
        diff = diff_to_builtins(compare_documents(before, after))
        return _page(request, "price_diff.html", old=old, new=new, diff=diff)

    @get("/prices/{version:str}")
    async def price_version(self, request: Request[Any, Any, Any], version: str) -> Template:
        return _page(request, "price_version.html", version=await prices_of(request).get(version))
