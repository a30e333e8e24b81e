"""The headers every console response carries: no framing, no inline script, no caching.

The pages have no inline script, style or event handler, so the policy allows only
the console's own stylesheet. Wrapped around the application's handler for every path under
`/console`, so that error pages, redirects and the router's own 404 and 405 answers carry
the headers too. A response that already set `Cache-Control` (the stylesheet) keeps its own.
"""

from __future__ import annotations

from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; object-src 'none'; base-uri 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
_CACHE = b"cache-control"


def console_headers(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if not scope.get("path", "").startswith("/console"):
            await app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw: list[Any] = list(message.get("headers") or [])
                names = {name.lower() for name, _ in raw}
                raw.extend(h for h in HEADERS if h[0] not in names)
                if _CACHE not in names:
                    raw.append((_CACHE, b"no-store"))
                message["headers"] = raw
            await send(message)

        await app(scope, receive, send_with_headers)

    middleware.__wrapped__ = app  # type: ignore[attr-defined]  # what it wraps, for inspection
    return middleware
