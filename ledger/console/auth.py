"""Who is using the console: the session guard, role checks and CSRF checks of form posts.

A console request is authenticated by its session cookie (see `session.py`) and the
session's live row in the database (`sessions.py`), never by a bearer header; the
guard puts the same `Principal` the admin API would have on
`connection.state.principal`, so `actor_of(request)` and the audit log record the
console user exactly as they would record that token on the API. Roles are the API's:
a handler states its minimum in `opt={"role": ...}` (default viewer).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import structlog
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.datastructures import FormMultiDict
from litestar.handlers.base import BaseRouteHandler

from ledger.console import sessions
from ledger.console.session import SESSION_COOKIE, ConsoleKeys, SessionData
from ledger.errors import Forbidden
from ledger.http.auth import Principal
from ledger.settings import ROLES, Role


class LoginRequired(Exception):
    """No valid session: the console answers with a redirect to its login page."""

    def __init__(self, target: str) -> None:
        super().__init__("login required")
        self.target = target


def keys_of(connection: ASGIConnection[Any, Any, Any, Any]) -> ConsoleKeys:
    """The console's keys, made once per app on first use (no await between check and set)."""
    state = connection.app.state
    keys: ConsoleKeys | None = state.get("console_keys")
    if keys is None:
        keys = ConsoleKeys.from_settings(state.settings, state.tokens)
        state.console_keys = keys
    return keys


def login_url(target: str) -> str:
    return "/console/login?next=" + quote(target, safe="/")


def safe_next(target: str | None) -> str:
    """Only a path inside the console: an open redirect would make the login page a phishing tool."""
    if not target or not target.startswith("/console") or target.startswith("//") or "\\" in target:
        return "/console/accounts"
    return target


def may(principal: Principal, role: Role) -> bool:
    return ROLES.index(principal.role) >= ROLES.index(role)


async def console_guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    found = keys_of(connection).read(connection.cookies.get(SESSION_COOKIE))
    if found is None or not await sessions.is_live(connection.app.state.engine, found[0].nonce):
        path = connection.url.path
        query = connection.url.query
        target = f"{path}?{query}" if query and connection.scope.get("method") == "GET" else path
        raise LoginRequired(target)
    session, principal = found
    connection.state.principal = principal
    connection.state.console_session = session
    structlog.contextvars.bind_contextvars(actor=principal.identity)
    needed: Role = handler.opt.get("role", "viewer")
    if not may(principal, needed):
        raise Forbidden(f"role {principal.role} may not do this; {needed} or above is required")


def session_of(request: Request[Any, Any, Any]) -> SessionData:
    session: SessionData = request.state.console_session
    return session


def csrf_of(request: Request[Any, Any, Any]) -> str:
    return keys_of(request).csrf_token(session_of(request).nonce)


async def checked_form(request: Request[Any, Any, Any]) -> FormMultiDict:
    """The posted form, after its CSRF token matched the session's (403 otherwise, nothing done)."""
    form = await request.form()
    if not keys_of(request).csrf_ok(session_of(request).nonce, form.get("csrf_token")):
        raise Forbidden("the form's CSRF token is missing or does not match this session; reload the page")
    return form
