"""The console's session routes and its operations pages (reconciliation, integrity, prices).

Pages never call the service over HTTP: they use `request.app.state.*` services
directly, with the console user's `Actor`, exactly as the admin API does. The account,
hold and revenue pages live in `accounts_pages.py`, `holds_pages.py` and
`revenue_pages.py`; what every page shares is in `rendering.py`.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Annotated, Any

import structlog
from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter
from litestar.response import Redirect, Template

from ledger.console import sessions
from ledger.console.auth import console_guard, keys_of, safe_next
from ledger.console.rendering import HANDLERS, PAGE, page, prices_of
from ledger.console.session import (
    COOKIE_PATH,
    LOGIN_COOKIE,
    LOGIN_NONCE_SECONDS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    login_nonce,
)
from ledger.db import read_only
from ledger.http.auth import TokenRegistry
from ledger.http.query import Cursor
from ledger.http.throttle import AuthThrottle, record_failure, refuse_if_blocked
from ledger.integrity import service as integrity
from ledger.reconciliation.service import ReconciliationService
from pricing.diff import compare_documents, diff_to_builtins

log = structlog.get_logger(__name__)

STATIC = Path(__file__).resolve().parent / "static"


def _secure(request: Request[Any, Any, Any]) -> bool:
    """`LEDGER_CONSOLE_SECURE_COOKIE`: on outside embedded mode, off in embedded (http) mode."""
    secure: bool = request.app.state.settings.console_secure_cookie
    return secure


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


class ConsoleLoginController(Controller):
    """Login, logout and the stylesheet: the routes that work without a session."""

    path = "/console"
    include_in_schema = False
    exception_handlers = HANDLERS
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
    """Home and the operations pages."""

    path = "/console"
    guards = [console_guard]
    include_in_schema = False
    exception_handlers = HANDLERS
    opt = {"body": "form"}  # HTML forms: the admission check takes form bodies here

    @get("/")
    async def home(self) -> Redirect:
        return Redirect("/console/accounts", status_code=303)

    @get("/reconciliation")
    async def reconciliation(self, request: Request[Any, Any, Any], cursor: Cursor) -> Template:
        svc: ReconciliationService = request.app.state.reconciliation
        runs, next_cursor = await svc.list(cursor=cursor, limit=20)
        return page(request, "reconciliation.html", runs=runs, next_cursor=next_cursor)

    @get("/integrity")
    async def integrity(self, request: Request[Any, Any, Any]) -> Template:
        report = await integrity.check(request.app.state.engine)
        return page(request, "integrity.html", report=report)

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
        return page(request, "prices.html", versions=versions, previous=previous, next_cursor=next_cursor)

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
        return page(request, "price_diff.html", old=old, new=new, diff=diff)

    @get("/prices/{version:str}")
    async def price_version(self, request: Request[Any, Any, Any], version: str) -> Template:
        return page(request, "price_version.html", version=await prices_of(request).get(version))
