"""The console in a real browser: headless Chromium against a real `ledger serve`.

Chromium is driven over the DevTools protocol (a tiny client on the `websockets`
package, which uvicorn[standard] already installs). The test opens an account's
statement while logged out, is sent to the login page, logs in with a finance token,
lands on the statement, checks what it shows and saves a screenshot.

Skipped only when no Chromium is installed and `CI` is unset; in CI a missing
browser is a failure (`.ci/run` installs Debian's `chromium`).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from websockets.sync.client import ClientConnection, connect

from tests.conftest import FINANCE, GATEWAY, TEST_ENV, auth, fresh_currency, publish, simple_document
from tests.serving import Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"), reason="no chromium installed (and CI is unset)"
)


class Tab:
    """One page target over CDP: send a command, wait for its answer, keep the events."""

    def __init__(self, url: str) -> None:
        self.ws: ClientConnection = connect(url, max_size=64 * 1024 * 1024, open_timeout=10)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=30))
            if message.get("id") == call_id:
                assert "error" not in message, message
                result: dict[str, Any] = message.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return answer["result"].get("value")

    def wait_for(self, path: str, timeout: float = 15) -> None:
        """Until the page at `path` has loaded (after redirects)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.evaluate("[location.pathname, document.readyState]")
            if state == [path, "complete"]:
                return
            time.sleep(0.1)
        raise AssertionError(f"page did not reach {path}; at {self.evaluate('location.href')}")

    def close(self) -> None:
        self.ws.close()


@pytest.fixture(scope="module")
def server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {**TEST_ENV, "LEDGER_DATABASE_URL": database}
    log = tmp_path_factory.mktemp("console-server") / "server.log"
    with Server(env, log, drop=("LEDGER_REDIS_URL",), stop_timeout=10) as serve:
        serve.wait_ready(30)
        yield serve.base


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Tab]:
    assert CHROMIUM is not None, "CI is set but chromium is not installed: .ci/run installs it"
    profile = tmp_path / "profile"
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tab: Tab | None = None
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (active.exists() and active.read_text().count("\n") >= 1):
            assert proc.poll() is None, "chromium exited at start"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port = active.read_text().splitlines()[0]
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
        page = next(t for t in targets if t["type"] == "page")
        tab = Tab(page["webSocketDebuggerUrl"])
        tab.call("Page.enable")
        tab.call(
            "Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False
        )
        yield tab
    finally:
        if tab is not None:
            tab.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_log_in_open_statement_and_screenshot(
    server: str, browser: Tab, client: TestClient[Any], make_account: Any, tmp_path: Path
) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account_id = make_account("25", currency=currency)
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": "d2", "amount": "4.125", "reference": "wire 2026-07-02"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    reserve = {
        "account_id": account_id,
        "idempotency_key": "h1",
        "model": "t-simple",
        "max_output_tokens": 100,
    }
    r = client.post("/v1/holds", json=reserve, headers=auth(GATEWAY))
    assert r.status_code == 201, r.text

    statement = f"/console/accounts/{account_id}/statement"
    browser.call("Page.navigate", url=server + statement)
    browser.wait_for("/console/login")
    browser.evaluate(
        f"document.querySelector('input[name=token]').value = {json.dumps(FINANCE)};"
        "document.querySelector('form[action=\"/console/login\"]').submit(); true"
    )
    browser.wait_for(statement)

    text = browser.evaluate("document.body.innerText")
    assert f"Statement · {account_id}" in text
    assert "Download CSV" in text
    for figure in ("29.125", "0.003", "29.122", "4.125", "wire 2026-07-02", "hold", "deposit"):
        assert figure in text, figure
    assert browser.evaluate("document.querySelectorAll('table.journal tbody tr').length") == 3
    # the session cookie is HttpOnly: the page's scripts cannot read it
    assert "ledger_console" not in browser.evaluate("document.cookie")

    shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
    path = tmp_path / "console-statement.png"
    path.write_bytes(shot)
    print(f"\nconsole screenshot: {path}")
    assert png_size(shot) == (1280, 900)
    assert len(shot) > 10_000
