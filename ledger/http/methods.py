"""`OPTIONS` on any route: 204 with `Allow` naming every method its path serves.

Litestar adds an OPTIONS handler to each route it builds, but a path served by handlers
of several routes (`GET` and `PATCH /admin/v1/accounts/{id}`) gets the last route's
handler, whose `Allow` names only that route's methods; and the handler sits behind the
controller's guards, so asking without a token would be a 401. `options_middleware` answers
OPTIONS itself, before the guards (nothing in the answer is private: the same methods
are in the OpenAPI document), from `allowed_methods(app)`: the union of the methods of
every route, per path template, as the router resolves them. `Allow` is sorted and
always includes OPTIONS; HEAD is listed only where a handler serves it.
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Receive, Scope, Send

ALLOWED = "ledger_allowed_methods"  # app.state key: path template -> the `Allow` value


def allowed_methods(app: Litestar) -> dict[str, str]:
    methods: dict[str, set[str]] = {}
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            methods.setdefault(route.path_format, {"OPTIONS"}).update(route.methods)
    return {path: ", ".join(sorted(names)) for path, names in methods.items()}


def options_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "OPTIONS":  # HTTP only: a websocket scope has no method
            await app(scope, receive, send)
            return
        respond: Any = send
        allowed: dict[str, str] = scope["litestar_app"].state[ALLOWED]
        allow = allowed.get(scope.get("path_template") or "", "OPTIONS")
        await respond(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [(b"allow", allow.encode("latin-1"))],
            }
        )
        await respond({"type": "http.response.body", "body": b""})

    return middleware
