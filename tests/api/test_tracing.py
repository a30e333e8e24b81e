"""Opt-in tracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, a gateway's trace (W3C `traceparent`)
continues into the ledger: its reserve and settle export spans of that trace, the database's
statements included, over OTLP/HTTP to a receiver (a raw http.server inside the test)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import (
    GATEWAY,
    TEST_ENV,
    auth,
    fresh_currency,
    new_id,
    open_account,
    publish,
    simple_document,
)


class Receiver(HTTPServer):
    """Collects every POST body (an ExportTraceServiceRequest) sent to /v1/traces."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[bytes] = []

    def spans(self) -> list[Any]:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        found = []
        for body in list(self.bodies):
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    found.extend(scope.spans)
        return found


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/traces":
            self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_gateway_trace_continues_into_the_ledger(
    receiver: Receiver, database: str, sa_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.app import create_app
    from ledger.settings import load_settings

    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export within a tenth of a second
    settings = load_settings(
        dict(TEST_ENV, LEDGER_DATABASE_URL=database, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    )
    assert settings.otel_endpoint == endpoint and settings.fast_lane

    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    traced = {"traceparent": f"00-{trace_id}-{parent_id}-01", **auth(GATEWAY)}
    with TestClient(create_app(settings, sa_url)) as client:
        currency = fresh_currency()
        publish(client, simple_document(currency))
        account = open_account(client, "1", currency=currency)
        body = {"account_id": account, "idempotency_key": new_id("r"), "model": "t-simple"}
        reserved = client.post("/v1/holds", json=body, headers=traced)
        assert reserved.status_code == 201, reserved.text
        usage = {"usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        settled = client.post(f"/v1/holds/{reserved.json()['id']}/settle", json=usage, headers=traced)
        assert settled.status_code == 200, settled.text
        deadline = time.monotonic() + 20
        while True:
            ours = [s for s in receiver.spans() if s.trace_id.hex() == trace_id]
            routes = {s.name for s in ours}
            # Every span wanted below: both requests' server spans (children of the gateway's
            # span; a settle-named child span can arrive before its request's) and a statement.
            served = sorted(s.name for s in ours if s.parent_span_id.hex() == parent_id)
            if (
                any(name.startswith("POST /v1/holds") and "settle" not in name for name in served)
                and any("settle" in name for name in served)
                and any(a.key == "db.system" for s in ours for a in s.attributes)
            ):
                break
            assert time.monotonic() < deadline, f"spans of the trace never arrived: {sorted(routes)}"
            time.sleep(0.2)

    servers = [s for s in ours if s.parent_span_id.hex() == parent_id]
    names = sorted(s.name for s in servers)
    assert any(name.startswith("POST /v1/holds") and "settle" not in name for name in names), names
    assert any("settle" in name for name in names), names
    statements = [s for s in ours if any(a.key == "db.system" for a in s.attributes)]
    by_id = {s.span_id: s for s in ours}
    assert statements and all(s.parent_span_id in by_id for s in statements)  # under the request's spans
    # No span of ours leaked into another trace (every request span continued the caller's).
    assert not [s for s in receiver.spans() if s.trace_id.hex() != trace_id and s.name.startswith("POST /v1")]


def test_without_the_endpoint_nothing_of_opentelemetry_is_loaded(database: str, sa_url: str) -> None:
    """The service runs without the `otel` extra; asked to trace without it, it refuses to start."""
    import subprocess
    import sys

    code = f"""
import sys
sys.modules["opentelemetry"] = None  # as if the extra were not installed: any import of it fails
from ledger.app import create_app
from ledger.settings import load_settings
from ledger.tracing import TracingUnavailable
env = {dict(TEST_ENV, LEDGER_DATABASE_URL=database)!r}
app = create_app(load_settings(env), {sa_url!r})
assert app.asgi_handler.__wrapped__.__class__.__name__ == "FastLane"  # inside the console headers
assert not [m for m in sys.modules if m.startswith("opentelemetry.")], "imported"
try:
    create_app(load_settings(dict(env, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:1")), {sa_url!r})
except TracingUnavailable as error:
    print("refused:", error)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed" in out.stdout
