"""A client that hangs up mid-body is not a server error.

Against a real `ledger serve`: the client declares `Content-Length: 1000`, writes 10
bytes and closes the socket. Nobody is left to answer, and the service did nothing
wrong: the request is logged at info (no traceback, no error line) and counted as 499
(nginx's "client closed request") in `ledger_http_requests_total` and the access log,
never as a 500. Both paths: the fast lane (reserve, settle) hands the request to
Litestar, which meets the disconnect; an admin route goes through Litestar directly.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN, GATEWAY, TEST_ENV
from tests.serving import Server

HANG_UPS = [
    ("/v1/holds", GATEWAY),  # fast lane
    ("/v1/holds/01a24fb1-2bbd-7ae5-81bb-027d406589d7/settle", GATEWAY),  # fast lane
    ("/admin/v1/accounts", ADMIN),  # Litestar's routing
    ("/console/login", ADMIN),  # the console's own error pages (found in review: a 500 there)
]
ROUTES = {"/v1/holds", "/v1/holds/{hold_id}/settle", "/admin/v1/accounts", "/console/login"}
_COUNT = re.compile(
    r'^ledger_http_requests_total\{method="POST",route="([^"]+)",status="(\d+)"\} (\S+)$', re.M
)


def hang_up(port: int, path: str, token: str) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        s.sendall(head.encode() + b'{"usage": ')  # 10 of the 1000 bytes
        time.sleep(0.2)  # the service has started reading the body


def counts(base: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    return {(route, status): float(n) for route, status, n in _COUNT.findall(text)}


@pytest.mark.parametrize("fast_lane", ["1", "0"])
def test_a_hang_up_mid_body_is_info_and_499_not_500(
    own_database: str, tmp_path: Path, fast_lane: str
) -> None:
    env = {
        **TEST_ENV,
        "LEDGER_DATABASE_URL": own_database,
        "LEDGER_LOG_LEVEL": "info",
        "LEDGER_FAST_LANE": fast_lane,
    }
    with Server(env, tmp_path / "server.log") as server:
        server.wait_ready(60)
        for path, token in HANG_UPS:
            hang_up(server.port, path, token)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            seen = counts(server.base)
            if sum(n for (route, status), n in seen.items() if route in ROUTES) >= len(HANG_UPS):
                break
            time.sleep(0.1)
        log = server.log()
    assert {key: n for key, n in seen.items() if key[0] in ROUTES} == {
        (route, "499"): 1.0 for route in ROUTES
    }
    assert "Traceback" not in log
    access = [line for line in log.splitlines() if "route=" in line and "POST" in line]
    assert len(access) == len(HANG_UPS), log
    assert all("status=499" in line and "[info" in line for line in access), access
    disconnected = [line for line in log.splitlines() if "request.client_disconnected" in line]
    assert len(disconnected) == len(HANG_UPS) and all("[info" in line for line in disconnected), log
    assert "[error" not in log and "status=500" not in log, log
