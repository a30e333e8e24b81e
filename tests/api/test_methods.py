"""Methods as HTTP clients expect them: 405 names what is allowed, OPTIONS lists every method.

For every route of the app: `OPTIONS` (no token needed: nothing in the answer is private)
is 204 with `Allow` naming each method the path serves, OPTIONS included; every other
method is 405 in the contract's error shape with the same `Allow`. The 405's list comes
from Litestar's router and the OPTIONS answer from `ledger.http.methods`, so each checks
the other; a few paths served by several handlers are spelled out by hand.
"""

from __future__ import annotations

import re
from typing import Any

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import TestClient

from tests.conftest import ADMIN, auth

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def paths(app: Litestar) -> list[str]:
    found = {route.path for route in app.routes if isinstance(route, HTTPRoute)}
    return sorted(re.sub(r"\{[^}]+\}", "x", path) for path in found)


def test_options_lists_every_method_of_a_path_served_by_several_handlers(client: TestClient[Any]) -> None:
    expected = {
        "/admin/v1/accounts": "GET, OPTIONS, POST",
        "/admin/v1/accounts/x": "GET, OPTIONS, PATCH",
        "/admin/v1/accounts/x/alert": "DELETE, GET, OPTIONS, PUT",
        "/admin/v1/accounts/x/budgets/x": "GET, OPTIONS, PUT",
        "/admin/v1/accounts/x/grants": "GET, OPTIONS, POST",
        "/v1/holds": "OPTIONS, POST",
        "/healthz": "GET, OPTIONS",
    }
    for path, allow in expected.items():
        r = client.options(path)  # no token
        assert (r.status_code, r.headers.get("allow")) == (204, allow), path
        assert r.content == b""


def test_every_other_method_is_405_with_the_same_allow(client: TestClient[Any], app: Litestar) -> None:
    checked = 0
    for path in paths(app):
        options = client.options(path)
        assert options.status_code == 204, (path, options.text)
        allow = options.headers["allow"]
        allowed = {m.strip() for m in allow.split(",")}
        assert "OPTIONS" in allowed and allowed - {"OPTIONS", "HEAD"}, (path, allow)
        for method in METHODS:
            if method in allowed:
                continue
            r = client.request(method, path, headers=auth(ADMIN))
            assert r.status_code == 405, (method, path, r.text)
            assert r.headers.get("allow") == allow, (method, path)
            assert r.json() == {
                "error": {
                    "type": "invalid_request",
                    "code": "method_not_allowed",
                    "message": "method not allowed on this route",
                    "param": None,
                }
            }
            checked += 1
    assert checked > 100
