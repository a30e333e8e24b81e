"""The console in a real browser: headless Chromium against a real `ledger serve`.

Chromium is driven over the DevTools protocol (a tiny client on the `websockets`
package, which uvicorn[standard] already installs). The test builds one account's
history (deposit, promotional grant, settled, released and open holds at the
contract's USD prices), opens its statement while logged out, logs in from the
keyboard (typing the token, Enter), then visits every console page: it checks what
each shows, that every input has a label, that keyboard focus is visible and that no
Content-Security-Policy violation was reported, and saves a screenshot of each.

Screenshots go to `LEDGER_CONSOLE_SCREENSHOTS` when set (the docs' pictures are made with
`LEDGER_CONSOLE_SCREENSHOTS=docs/console`), else to a pytest temporary folder; the
folder is printed. The data is the same on every run (fixed account ids and amounts);
the times shown and the revenue chart's days follow the clock.

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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from websockets.sync.client import ClientConnection, connect

from tests.conftest import FINANCE, GATEWAY, TEST_ENV, auth, fresh_currency, publish, simple_document
from tests.serving import Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CSP_WATCH = (
    "window.__csp = [];"
    "document.addEventListener('securitypolicyviolation',"
    " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
)
MAX_PNG = 150 * 1024

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"), reason="no chromium installed (and CI is unset)"
)


class Tab:
    """One page target over CDP: send a command, wait for its answer, keep the events."""

    def __init__(self, url: str) -> None:
        self.ws: ClientConnection = connect(url, max_size=64 * 1024 * 1024, open_timeout=10)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=30))
            if message.get("id") == call_id:
                assert "error" not in message, message
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

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
        tab.call("Log.enable")
        # Runs before each document's own code (DevTools is not subject to the page's CSP):
        # records every CSP violation the page reports.
        tab.call("Page.addScriptToEvaluateOnNewDocument", source=CSP_WATCH)
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


@pytest.fixture
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("LEDGER_CONSOLE_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {folder.resolve()}")
    return folder


class Visit:
    """Open console pages in the tab, check the basics every page must meet, screenshot them."""

    def __init__(self, tab: Tab, base: str, folder: Path) -> None:
        self.tab, self.base, self.folder = tab, base, folder
        self.taken: list[str] = []

    def open(self, path: str, *, lands: str | None = None) -> str:
        self.tab.call("Page.navigate", url=self.base + path)
        self.tab.wait_for(lands or path.split("?")[0])
        return str(self.tab.evaluate("document.body.innerText"))

    def check_and_shoot(self, name: str, *, height: int = 900, split_at: tuple[str, ...] = ()) -> None:
        tab = self.tab
        assert tab.evaluate("window.__csp") == [], f"{name}: CSP violations"
        refused = [
            e["params"]["entry"]["text"]
            for e in tab.events
            if e.get("method") == "Log.entryAdded"
            and "Content Security Policy" in e["params"]["entry"]["text"]
        ]
        assert refused == [], refused
        unlabelled = tab.evaluate(
            "[...document.querySelectorAll('input:not([type=hidden]), select')]"
            ".filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))"
            ".map(e => e.name)"
        )
        assert unlabelled == [], f"{name}: inputs without a label: {unlabelled}"
        assert tab.evaluate("document.querySelectorAll('[style]').length") == 0, f"{name}: style attribute"
        full = int(tab.evaluate("document.documentElement.scrollHeight"))
        # a long page in several pictures, each cut above an element (each PNG stays small)
        cuts = [0]
        for selector in split_at:
            top = tab.evaluate(f"document.querySelector({json.dumps(selector)}).getBoundingClientRect().top")
            cuts.append(int(top) + int(tab.evaluate("window.scrollY")) - 12)
        ends = [*cuts[1:], min(full, cuts[-1] + height)]
        for n, (top, end) in enumerate(zip(cuts, ends, strict=True), start=1):
            self.shoot(name if n == 1 else f"{name}-{n}", top, end - top)

    def shoot(self, name: str, top: int, height: int) -> None:
        clip = {"x": 0, "y": top, "width": 1280, "height": max(height, 300), "scale": 1}
        shot = base64.b64decode(
            self.tab.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)[
                "data"
            ]
        )
        assert png_size(shot) == (1280, clip["height"])
        assert len(shot) > 10_000, f"{name}: {len(shot)} bytes (a blank page?)"
        if os.environ.get("LEDGER_CONSOLE_SCREENSHOTS"):  # pictures kept in the docs stay small
            assert len(shot) < MAX_PNG, f"{name}: {len(shot)} bytes"
        (self.folder / f"{name}.png").write_bytes(shot)
        self.taken.append(name)


def history(client: TestClient[Any], contract_version: str) -> dict[str, Any]:
    """acme-research: a deposit, a promotional grant, settled / released / interrupted / open holds."""
    account_id = "acme-research"
    r = client.post("/admin/v1/accounts", json={"account_id": account_id}, headers=auth(FINANCE))
    assert r.status_code == 201, r.text
    steps = [
        ("deposits", {"idempotency_key": "d1", "amount": "34.67", "reference": "wire 2026-11-30"}),
        ("adjustments", {"idempotency_key": "a1", "amount": "-0.25", "reason": "bank fee, ticket 4411"}),
    ]
    for kind, body in steps:
        r = client.post(f"/admin/v1/accounts/{account_id}/{kind}", json=body, headers=auth(FINANCE))
        assert r.status_code == 201, r.text
    expires = (datetime.now(UTC) + timedelta(days=31)).replace(hour=0, minute=0, second=0, microsecond=0)
    r = client.post(
        f"/admin/v1/accounts/{account_id}/grants",
        json={
            "idempotency_key": "g1",
            "amount": "5",
            "expires_at": expires.isoformat(),
            "priority": 0,
            "reason": "launch promotion",
            "reference": "campaign 2026-12",
        },
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    holds: dict[str, str] = {}

    def hold(key: str, model: str) -> str:
        body = {
            "account_id": account_id,
            "idempotency_key": key,
            "model": model,
            "max_input_tokens": 20000,
            "max_output_tokens": 2000,
        }
        r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
        assert r.status_code == 201, r.text
        hold_id: str = r.json()["id"]
        holds[key] = hold_id
        return hold_id

    settled_usage = [
        (
            "h1",
            "gpt-6-luna",
            {
                "prompt_tokens": 12000,
                "completion_tokens": 800,
                "prompt_tokens_details": {"cached_tokens": 2000},
            },
        ),
        (
            "h2",
            "claude-sonnet-4-6",
            {
                "prompt_tokens": 9000,
                "completion_tokens": 1500,
                "prompt_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 1000},
                "claude_cache_creation_5_m_tokens": 1000,
            },
        ),
        ("h3", "gpt-6-luna", {"prompt_tokens": 3000, "completion_tokens": 250}),
    ]
    for key, model, used in settled_usage:
        hold_id = hold(key, model)
        r = client.post(f"/v1/holds/{hold_id}/settle", json={"usage": used}, headers=auth(GATEWAY))
        assert r.status_code == 200, r.text
    released = hold("h4", "claude-sonnet-4-6")
    r = client.post(
        f"/admin/v1/holds/{released}/release",
        json={"reason": "upstream outage, ticket 5120"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200, r.text
    interrupted = hold("h5", "gpt-6-luna")
    r = client.post(
        f"/v1/holds/{interrupted}/interrupt",
        json={"usage": {"prompt_tokens": 4000, "completion_tokens": 120}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    hold("h6", "claude-sonnet-4-6")
    return {"account": account_id, "holds": holds}


def test_every_console_page_in_a_browser(
    server: str,
    browser: Tab,
    client: TestClient[Any],
    contract_version: str,
    shots: Path,
) -> None:
    made = history(client, contract_version)
    account_id, holds = made["account"], made["holds"]
    currency = fresh_currency()
    old = publish(client, simple_document(currency, input_rate="2", output_rate="10"))
    new = publish(client, simple_document(currency, input_rate="2.5", output_rate="10"))
    visit = Visit(browser, server, shots)

    # logged out: the statement sends us to the login page; log in from the keyboard
    statement = f"/console/accounts/{account_id}/statement"
    visit.open(statement, lands="/console/login")
    assert browser.evaluate("document.activeElement.name") == "token"  # autofocus
    visit.check_and_shoot("01-login")
    browser.call("Input.insertText", text=FINANCE)
    for kind in ("keyDown", "keyUp"):
        browser.call(
            "Input.dispatchKeyEvent",
            type=kind,
            key="Enter",
            code="Enter",
            windowsVirtualKeyCode=13,
            text="\r" if kind == "keyDown" else "",
        )
    browser.wait_for(statement)
    assert "ledger_console" not in browser.evaluate("document.cookie")  # HttpOnly

    text = visit.open("/console/accounts?q=acme")
    assert account_id in text and "Paid" in text and "Granted" in text
    visit.check_and_shoot("02-accounts")

    text = visit.open(f"/console/accounts/{account_id}")
    for shown in ("PAID", "GRANTED", "launch promotion", "Grant credit", "Unresolved holds"):
        assert shown in text.upper() if shown.isupper() else shown in text, shown
    figures = browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('[data-figure]')]"
        ".map(e => [e.dataset.figure, e.innerText]))"
    )
    assert figures["granted"] != "0.00" and figures["paid"].replace(",", "")
    # keyboard: Tab moves from the deposit amount to its reason, and focus is visible
    browser.evaluate("document.getElementById('deposit-amount').focus(); true")
    browser.call("Input.dispatchKeyEvent", type="keyDown", key="Tab", code="Tab", windowsVirtualKeyCode=9)
    browser.call("Input.dispatchKeyEvent", type="keyUp", key="Tab", code="Tab", windowsVirtualKeyCode=9)
    assert browser.evaluate("document.activeElement.id") == "deposit-reason"
    assert browser.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    browser.evaluate("document.activeElement.blur(); true")
    assert browser.evaluate("document.querySelectorAll('table.journal [data-transaction]').length") > 0
    kinds = browser.evaluate("[...document.querySelectorAll('table.journal .kind')].map(e => e.innerText)")
    assert "reserve" not in kinds and "release" not in kinds and "settle" in kinds
    assert browser.evaluate("document.querySelectorAll('#chart-usage svg.chart rect').length") == 30
    usage_models = browser.evaluate(
        "[...document.querySelectorAll('[data-model]')].map(e => e.dataset.model)"
    )
    assert usage_models == ["claude-sonnet-4-6", "gpt-6-luna"]
    visit.check_and_shoot("03-account", split_at=("#forms", "#unresolved"))

    text = visit.open(statement)
    assert f"Statement · {account_id}" in text and "Totals by kind" in text
    assert "Download CSV of this view" in text
    visit.check_and_shoot("04-statement", split_at=("#transactions",))

    settled = holds["h2"]
    text = visit.open(f"/console/holds/{settled}")
    assert settled in text  # the full id
    assert "cache_write_5m" in text and "Timeline" in text and contract_version in text
    visit.check_and_shoot("05-hold", height=1200)

    text = visit.open(f"/console/holds/{holds['h4']}")
    assert "upstream outage, ticket 5120" in text and "admin" in text
    visit.check_and_shoot("06-hold-released", height=1000)

    text = visit.open(f"/console/holds?account_id={account_id}")
    links = browser.evaluate("[...document.querySelectorAll('a.hold')].map(a => a.title)")
    assert links[:6] == [holds[k] for k in ("h6", "h5", "h4", "h3", "h2", "h1")]  # newest first
    visit.check_and_shoot("07-holds")

    text = visit.open("/console/revenue")
    assert browser.evaluate("document.querySelectorAll('svg.chart rect.bar').length") >= 30
    assert "gpt-6-luna" in text and "claude-sonnet-4-6" in text
    visit.check_and_shoot("08-revenue", height=1000)

    r = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))
    assert r.status_code == 201, r.text
    text = visit.open("/console/reconciliation")
    assert "Reconciliation runs" in text
    visit.check_and_shoot("09-reconciliation")

    text = visit.open("/console/integrity")
    assert "OK: every balance matches its journal" in text
    visit.check_and_shoot("10-integrity")

    text = visit.open("/console/prices")
    assert new in text and f"diff vs {old}" in text  # newest first: this test's versions lead
    visit.check_and_shoot("11-prices")

    text = visit.open(f"/console/prices/{contract_version}")
    assert "gpt-6-luna" in text
    visit.check_and_shoot("12-price-version")

    text = visit.open(f"/console/prices/diff?old={old}&new={new}")
    assert "Rates" in text
    visit.check_and_shoot("13-price-diff")

    text = visit.open("/console/holds/00000000-0000-7000-8000-000000000000")
    assert "hold_not_found" in text
    visit.check_and_shoot("14-not-found")
    assert len(visit.taken) == 17
