"""ASGI middleware: a request id on every log line and response, and per-route metrics."""

from __future__ import annotations

import time
import uuid
from typing import Any

import structlog
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from ledger.metrics import LATENCY, REQUESTS

log = structlog.get_logger("ledger.access")


def request_context_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        incoming = headers.get(b"x-request-id", b"").decode("latin-1")[:64]
        request_id = incoming if incoming.isprintable() and incoming else uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        scope["state"]["request_id"] = request_id
        status = {"code": 500}
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                raw: list[Any] = list(message.get("headers") or [])
                raw.append((b"x-request-id", request_id.encode("latin-1")))
                message["headers"] = raw
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            route = scope.get("path_template") or "unmatched"
            method = scope.get("method", "")
            elapsed = time.perf_counter() - started
            LATENCY.labels(method, route).observe(elapsed)
            REQUESTS.labels(method, route, str(status["code"])).inc()
            log.info(
                "request",
                method=method,
                route=route,
                status=status["code"],
                duration_ms=round(elapsed * 1000, 2),
            )

    return middleware
