"""The console's response headers, server-side logout, and the Secure flag of its cookies.

Real PostgreSQL; "another process" is a second app over the same database with the
same identity key (as a second web worker or replica would be).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from ledger.settings import load_settings
from tests.api.helpers_app import app_client
from tests.conftest import FINANCE, VIEWER
from tests.console.helpers import hidden, login

HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@pytest.fixture
def web(client: TestClient[Any]) -> Iterator[TestClient[Any]]:
    client.cookies.clear()
    yield client
    client.cookies.clear()


def assert_hardened(r: Any, *, cache: str = "no-store") -> None:
    for name, value in HEADERS.items():
        assert r.headers.get(name) == value, (r.url, name)
    assert r.headers.get("cache-control") == cache, r.url
    policy = {
        part.strip().split(" ")[0]: part.strip()
        for part in r.headers["content-security-policy"].split(";")
        if part.strip()
    }
    assert policy["script-src"] == "script-src 'self'"
    assert policy["frame-ancestors"] == "frame-ancestors 'none'"
    assert policy["object-src"] == "object-src 'none'"
    assert policy["base-uri"] == "base-uri 'none'"
    assert policy["form-action"] == "form-action 'self'"
    assert "unsafe-inline" not in r.headers["content-security-policy"]


def test_every_console_response_carries_the_security_headers(web: TestClient[Any]) -> None:
    assert_hardened(web.get("/console/login"))
    assert_hardened(web.get("/console/accounts", follow_redirects=False))  # the redirect to login
    assert_hardened(login(web, "wrong-token"))  # 401 page
    assert login(web, FINANCE).status_code == 303
    page = web.get("/console/accounts")
    assert page.status_code == 200
    assert_hardened(page)
    assert_hardened(web.get("/console/accounts/no-such-account"))  # error page
    assert_hardened(web.get("/console/static/console.css"), cache="max-age=3600")
    # the router's own answers under /console (found in review: JSON without the headers)
    assert_hardened(web.get("/console/no-such-page"))
    assert_hardened(web.put("/console/login"))
    assert "content-security-policy" not in web.get("/healthz").headers  # the API is not the console
    # the pages have nothing the policy would block: no inline script, handler or style
    for text in (page.text, web.get("/console/login").text):
        assert "<script" not in text and "<style" not in text
        assert not re.search(r"\s(on[a-z]+|style)\s*=", text)


def test_a_copied_cookie_stops_working_after_logout_in_every_process(
    web: TestClient[Any], database: str
) -> None:
    assert login(web, VIEWER).status_code == 303
    copied = web.cookies["ledger_console"]
    page = web.get("/console/accounts")
    r = web.post(
        "/console/logout", data={"csrf_token": hidden(page.text, "csrf_token")}, follow_redirects=False
    )
    assert r.status_code == 303
    # the copy, in this process: back to the login page
    web.cookies.set("ledger_console", copied)
    r = web.get("/console/accounts", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/console/login")
    with app_client(database) as other:
        # and in another process, which does accept a live session of the first
        other.cookies.set("ledger_console", copied)
        r = other.get("/console/accounts", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/console/login")
        assert login(web, VIEWER).status_code == 303
        other.cookies.set("ledger_console", web.cookies["ledger_console"])
        assert other.get("/console/accounts", follow_redirects=False).status_code == 200


def test_expired_sessions_are_pruned_at_login(web: TestClient[Any], database: str) -> None:
    with psycopg.connect(database) as conn:
        conn.execute(
            "INSERT INTO console_sessions (nonce, actor, expires_at) "
            "VALUES ('expired-nonce-000001', 'viewer:x', now() - interval '1 minute')"
        )
        conn.commit()
    assert login(web, VIEWER).status_code == 303
    with psycopg.connect(database) as conn:
        left = conn.execute("SELECT count(*) FROM console_sessions WHERE expires_at < now()").fetchone()
        live = conn.execute("SELECT count(*) FROM console_sessions WHERE expires_at > now()").fetchone()
    assert left == (0,)
    assert live is not None and live[0] >= 1


def test_cookies_are_secure_by_default_outside_embedded_mode(database: str) -> None:
    with app_client(database, LEDGER_CONSOLE_SECURE_COOKIE="") as web:
        page = web.get("/console/login")
        assert "Secure" in page.headers["set-cookie"]
        r = web.post(
            "/console/login",
            data={"nonce": hidden(page.text, "nonce"), "token": FINANCE},
            cookies={"ledger_console_login": hidden(page.text, "nonce")},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        session = [v for k, v in r.headers.multi_items() if k == "set-cookie" and "ledger_console=" in v]
        assert len(session) == 1 and "Secure" in session[0]
    with app_client(database) as plain:  # TEST_ENV turns it off: the test client speaks http
        assert "Secure" not in plain.get("/console/login").headers["set-cookie"]
    assert load_settings({}).console_secure_cookie is False  # embedded (development) mode, over http
