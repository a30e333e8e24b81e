"""Helpers of the alert tests: a local webhook receiver, alert configuration, a delivery pass.

`Receiver` is a threaded http.server that records every request (path, headers, raw
body, the TLS server name asked for) and answers the statuses it was given in order
(then 200), after an optional delay: the "outside of the system" the delivery worker
talks to. It listens on 127.0.0.2, the one address the tests' LEDGER_WEBHOOK_ALLOWED_NETWORKS
allows (tests/conftest.py), unless told another host (a forbidden "internal service").
`names` is the tests' DNS: a resolver seam mapping made-up host names to addresses.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, auth, new_id
from tests.workers.conftest import MODEL

SECRET = "test-webhook-secret-0123456789abcdef"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


ALLOWED_HOST = "127.0.0.2"


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    host: str = ALLOWED_HOST
    port: int = 0
    tls: ssl.SSLContext | None = None
    requests: list[Received] = field(default_factory=list)
    server_names: list[str | None] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def bound_port(self) -> int:
        assert self.server is not None
        port: int = self.server.server_address[1]
        return port

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.bound_port}/hooks/ledger"

    def start(self) -> None:
        receiver = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    receiver.requests.append(Received(self.path, dict(self.headers.items()), body))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                if receiver.delay:
                    time.sleep(receiver.delay)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        if self.tls is not None:
            self.tls.sni_callback = lambda _sock, name, _ctx: receiver.server_names.append(name)
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@contextmanager
def receiving(**kwargs: Any) -> Iterator[Receiver]:
    receiver = Receiver(**kwargs)
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


Resolve = Callable[[str, int], Sequence[str]]


def names(mapping: dict[str, list[str]]) -> Resolve:
    """A resolver that knows made-up names (host -> its addresses); any other host, IP
    literals and `localhost` included, is resolved by the system."""
    from ledger.alerts.destination import system_resolve

    def resolve(host: str, port: int) -> list[str]:
        return list(mapping[host]) if host in mapping else system_resolve(host, port)

    return resolve


@contextmanager
def resolving(app: Any, resolve: Resolve) -> Iterator[None]:
    """The session app's alert configuration resolves host names with `resolve` meanwhile."""
    service = app.state.alerts
    before = service.resolve
    service.resolve = resolve
    try:
        yield
    finally:
        service.resolve = before


def set_alert(client: TestClient[Any], account_id: str, threshold: str, url: str) -> dict[str, Any]:
    r = client.put(
        f"/admin/v1/accounts/{account_id}/alert",
        json={"threshold": threshold, "webhook_url": url, "reason": "low-balance alert for test"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200, r.text
    alert: dict[str, Any] = r.json()
    return alert


def deposit(client: TestClient[Any], account_id: str, amount: str) -> None:
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": new_id("dep"), "amount": amount},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text


def cycle(client: TestClient[Any], account_id: str, *, max_output: int, completion: int) -> dict[str, Any]:
    """Reserve (input 1000 at 2/M, `max_output` at 10/M) then settle 1000 in, `completion` out."""
    body = {
        "account_id": account_id,
        "idempotency_key": new_id("key"),
        "model": MODEL,
        "max_output_tokens": max_output,
    }
    r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert r.status_code == 201, r.text
    usage = {"prompt_tokens": 1000, "completion_tokens": completion}
    r = client.post(f"/v1/holds/{r.json()['id']}/settle", json={"usage": usage}, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    hold: dict[str, Any] = r.json()
    return hold


def events(database: str, account_id: str) -> list[dict[str, Any]]:
    with psycopg.connect(database) as conn:
        cur = conn.execute(
            "SELECT id, event_id::text, kind, threshold::text, available_before::text, "
            "available_after::text, status, attempts FROM alert_events WHERE account_id = %s ORDER BY id",
            (account_id,),
        )
        names = [c.name for c in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def deliveries(database: str, event_id: int) -> list[tuple[int, int | None, bool]]:
    with psycopg.connect(database) as conn:
        return [
            (int(a), s, bool(d))
            for a, s, d in conn.execute(
                "SELECT attempt, status_code, delivered FROM alert_deliveries WHERE event_id = %s "
                "ORDER BY attempt",
                (event_id,),
            ).fetchall()
        ]


def delivery_settings(settings: Any, **changes: Any) -> Any:
    return replace(settings, **{"webhook_secret": SECRET, "alert_retry_base_seconds": 0, **changes})


def due_now(database: str, event_id: int) -> None:
    """Make a pending event due at once (its backoff is delivery state, so this may change)."""
    with psycopg.connect(database) as conn:
        conn.execute("UPDATE alert_events SET next_attempt_at = now() WHERE id = %s", (event_id,))


def deliver(sa_url: str, settings: Any, **seams: Any) -> dict[str, Any]:
    """One delivery pass on a fresh engine of its own (`seams`: `resolve`, `tls`)."""
    from ledger.alerts.delivery import deliver_pending
    from ledger.db import make_engine

    async def run() -> dict[str, Any]:
        engine = make_engine(sa_url, pool_size=2, max_overflow=2)
        try:
            return await deliver_pending(engine, settings, **seams)
        finally:
            await engine.dispose()

    return asyncio.run(run())
