"""ASGI middleware: a request id on every log line and response, and per-route metrics.

`begin` and `finish` are the two halves, shared with `ledger.holds.fastlane` (which
serves the gateway's hot calls before the framework and must log and count them
exactly as this middleware does).

A client that hangs up before its body is complete (the server's `receive` answers
`http.disconnect`) is marked in the request's scope state (`CLIENT_GONE`), so that the
exception handler answers the framework's "client disconnected" error as a 499 logged
at info, never as a 500 with a traceback.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import structlog
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

from ledger.metrics import LATENCY, REQUESTS

log = structlog.get_logger("ledger.access")

REQUEST_ID = b"x-request-id"
CLIENT_GONE = "ledger_client_gone"


def request_id_from(incoming_header: bytes) -> str:
    """The caller's X-Request-Id when it is printable (first 64 characters), else a fresh one."""
    incoming = incoming_header.decode("latin-1")[:64]
    return incoming if incoming.isprintable() and incoming else uuid.uuid4().hex


def begin(request_id: str) -> float:
    """Bind the request's log context; returns the start time for `finish`."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id)
    return time.perf_counter()


def finish(method: str, route: str, status: int, started: float) -> None:
    """The request's latency and count by route template, and its access-log line."""
    elapsed = time.perf_counter() - started
    LATENCY.labels(method, route).observe(elapsed)
    REQUESTS.labels(method, route, str(status)).inc()
    log.info("request", method=method, route=route, status=status, duration_ms=round(elapsed * 1000, 2))


def request_context_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        request_id = request_id_from(headers.get(REQUEST_ID, b""))
        started = begin(request_id)
        scope["state"]["request_id"] = request_id
        status = {"code": 500}
        state = scope["state"]

        async def receive_watching() -> ReceiveMessage:
            message = await receive()
            if message["type"] == "http.disconnect":
                state[CLIENT_GONE] = True
            return message

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                raw: list[Any] = list(message.get("headers") or [])
                raw.append((REQUEST_ID, request_id.encode("latin-1")))
                message["headers"] = raw
            await send(message)

        try:
            await app(scope, receive_watching, send_with_id)
        finally:
            route = scope.get("path_template") or "unmatched"
            finish(str(scope.get("method", "")), route, status["code"], started)

    return middleware
