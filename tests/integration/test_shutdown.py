"""`ledger serve` stops on SIGTERM within seconds, and finishes the requests it is serving.

The in-flight request is a real one whose client sends its body slowly: the service
has started it when SIGTERM arrives, and answers it in full before exiting. A client
that never finishes its body must not keep the service up: uvicorn's graceful
shutdown is bounded by LEDGER_SHUTDOWN_GRACE_SECONDS (it used to wait forever).
Both modes: embedded (PostgreSQL and the jobs in-process) and a configured database.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GATEWAY, TEST_ENV
from tests.serving import ROOT, Server

DEADLINE_SECONDS = 5.0


@pytest.fixture(scope="module")
def embedded_dir() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="lsd", dir="/tmp")  # short: the socket lives in it
    yield folder
    subprocess.run(
        [sys.executable, "-m", "ledger.cli", "stop-embedded"],
        cwd=ROOT,
        env={"LEDGER_DATA_DIR": folder, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
    )
    shutil.rmtree(folder, ignore_errors=True)


def _modes(database: str, contract_version: str, embedded_dir: str, mode: str) -> tuple[dict[str, str], str]:
    if mode == "embedded":
        return {"LEDGER_DATA_DIR": embedded_dir, "LEDGER_LOG_LEVEL": "warning"}, "dev-gateway"
    return {**TEST_ENV, "LEDGER_DATABASE_URL": database}, GATEWAY


def _start_request(port: int, token: str) -> tuple[socket.socket, bytes]:
    """Send a quote request's headers and the first bytes of its body; return the rest to send."""
    body = json.dumps({"model": "gpt-6-luna", "max_output_tokens": 1000}).encode()
    conn = socket.create_connection(("127.0.0.1", port), timeout=15)
    head = (
        "POST /v1/quotes HTTP/1.1\r\nHost: ledger\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    conn.sendall(head + body[:7])
    return conn, body[7:]


def _read_response(conn: socket.socket) -> tuple[int, dict[str, Any]]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        rest += conn.recv(65536)
    status = int(head.split(b" ", 2)[1])
    body: dict[str, Any] = json.loads(rest)
    return status, body


def _exit_seconds(server: Server, since: float) -> float:
    server.proc.wait(30)
    return time.monotonic() - since


@pytest.mark.parametrize("mode", ["embedded", "database"])
def test_sigterm_finishes_the_in_flight_request_then_exits_quickly(
    database: str, contract_version: str, embedded_dir: str, mode: str, tmp_path: Path
) -> None:
    env, token = _modes(database, contract_version, embedded_dir, mode)
    with Server(env, tmp_path / "serve.log") as server:
        server.wait_ready()
        time.sleep(0.5)  # let the embedded jobs start their first ticks
        conn, rest = _start_request(server.port, token)
        time.sleep(0.3)
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)  # the request is in flight while the service is shutting down
        conn.sendall(rest)
        status, body = _read_response(conn)
        conn.close()
        assert status == 200, body
        assert body["reservation"]["amount"], body
        took = _exit_seconds(server, sent)
        assert took < DEADLINE_SECONDS, f"exited {took:.2f}s after SIGTERM\n{server.log()}"
        assert "Traceback" not in server.log()


@pytest.mark.parametrize("mode", ["embedded", "database"])
def test_a_client_that_never_finishes_does_not_hold_up_shutdown(
    database: str, contract_version: str, embedded_dir: str, mode: str, tmp_path: Path
) -> None:
    env, token = _modes(database, contract_version, embedded_dir, mode)
    env["LEDGER_SHUTDOWN_GRACE_SECONDS"] = "2"
    with Server(env, tmp_path / "serve.log") as server:
        server.wait_ready()
        conn, _ = _start_request(server.port, token)  # the rest of the body never comes
        time.sleep(0.3)
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        took = _exit_seconds(server, sent)
        conn.close()
        assert took < DEADLINE_SECONDS, f"exited {took:.2f}s after SIGTERM\n{server.log()}"
