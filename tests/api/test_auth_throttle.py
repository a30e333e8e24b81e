"""Failed authentications are throttled per client address (ledger.http.throttle).

Over HTTP with an app of its own (limit 3, the real database): wrong bearer tokens on
either surface and refused console logins count; past the limit every attempt from the
address, even with a correct token (the fast lane's reserve included), is 429 in the
error shape with Retry-After, and nothing is done. The window, the per-address
isolation, the memory bound and the proxy rule are checked on the class with a clock
of the test's own.
"""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from ledger.http.throttle import AuthThrottle
from tests.api.helpers_app import app_client
from tests.conftest import ADMIN, FINANCE, GATEWAY, VIEWER, auth, new_id, open_account
from tests.console.helpers import login


def assert_throttled(r: Any) -> None:
    assert r.status_code == 429, r.text
    assert r.json() == {
        "error": {
            "type": "rate_limit_error",
            "code": "rate_limited",
            "message": r.json()["error"]["message"],
            "param": None,
        }
    }
    assert 1 <= int(r.headers["retry-after"]) <= 60


def test_wrong_bearer_tokens_then_even_a_correct_one_get_429(database: str, client: TestClient[Any]) -> None:
    account_id = open_account(client, "5")
    with app_client(database, LEDGER_AUTH_FAILURE_LIMIT="3") as web:
        # successes never count
        for _ in range(5):
            assert web.get("/admin/v1/accounts", headers=auth(VIEWER)).status_code == 200
        assert web.get("/admin/v1/accounts", headers=auth("wrong-one")).status_code == 401
        assert web.get(f"/v1/accounts/{account_id}/balance", headers=auth("wrong-two")).status_code == 401
        assert web.get("/admin/v1/accounts", headers={"Authorization": "Basic eA=="}).status_code == 401
        assert web.get("/admin/v1/accounts", headers=auth(VIEWER)).status_code == 429
        assert_throttled(web.get("/admin/v1/accounts", headers=auth("wrong-four")))
        assert_throttled(web.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)))
        # the fast lane hands a refused address to the guard: the reserve is not made
        body = {"account_id": account_id, "idempotency_key": new_id("r"), "model": "gpt-5-mini"}
        assert_throttled(web.post("/v1/holds", json=body, headers=auth(GATEWAY)))
        deposit = {"idempotency_key": new_id("dep"), "amount": "1"}
        assert_throttled(
            web.post(f"/admin/v1/accounts/{account_id}/deposits", json=deposit, headers=auth(ADMIN))
        )
        # the console's login too, with a correct token
        assert login(web, FINANCE).status_code == 429
        metrics = web.get("/metrics").text
        assert 'ledger_auth_throttled_total{surface="gateway"}' in metrics
        assert 'ledger_auth_throttled_total{surface="console"}' in metrics
        assert 'ledger_auth_failures_total{surface="admin"}' in metrics
    # nothing was done: no hold, no deposit
    r = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY))
    assert (r.json()["balance"], r.json()["held"]) == ("5", "0")
    # another process (this suite's app) has its own memory: the address is not refused there
    assert client.get("/admin/v1/accounts", headers=auth(VIEWER)).status_code == 200


def test_refused_console_logins_count(database: str) -> None:
    with app_client(database, LEDGER_AUTH_FAILURE_LIMIT="2") as web:
        assert login(web, "not-a-token").status_code == 401
        assert login(web, GATEWAY).status_code == 401  # a gateway token is not a console login
        r = login(web, FINANCE)
        assert_throttled(r)
        assert "ledger_console" not in web.cookies
        assert web.get("/admin/v1/accounts", headers=auth(VIEWER)).status_code == 429


def test_window_passes_and_addresses_are_separate() -> None:
    now = [1000.0]
    throttle = AuthThrottle(limit=3, window=60, max_addresses=100, clock=lambda: now[0])
    for _ in range(2):
        throttle.fail("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") is None
    throttle.fail("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 60
    assert throttle.retry_after("10.0.0.2") is None
    now[0] += 59.5
    assert throttle.retry_after("10.0.0.1") == 1
    now[0] += 0.5
    assert throttle.retry_after("10.0.0.1") is None
    assert not throttle.blocked
    # a new window starts from zero
    throttle.fail("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") is None
    # ended refusals are forgotten even if their address never comes back
    throttle.fail("10.0.0.4")
    throttle.fail("10.0.0.4")
    throttle.fail("10.0.0.4")
    assert set(throttle.blocked) == {"10.0.0.4"}
    now[0] += 61
    assert throttle.retry_after("10.0.0.5") is None
    assert not throttle.blocked
    # failures spread beyond one window never add up
    for _ in range(5):
        now[0] += 61
        throttle.fail("10.0.0.3")
        throttle.fail("10.0.0.3")
    assert throttle.retry_after("10.0.0.3") is None


def test_memory_is_bounded_when_addresses_rotate() -> None:
    throttle = AuthThrottle(limit=2, window=60, max_addresses=50, clock=lambda: 0.0)
    for i in range(10_000):
        throttle.fail(f"203.0.113.{i}")
        throttle.fail(f"203.0.113.{i}")
    assert len(throttle._windows) == 50
    assert len(throttle.blocked) <= 50


def scope(peer: str, *forwarded: str) -> dict[str, Any]:
    headers = [(b"x-forwarded-for", value.encode()) for value in forwarded]
    return {"client": (peer, 5000), "headers": headers, "path": "/v1/holds"}


def test_client_address_is_the_peer_unless_it_is_a_trusted_proxy() -> None:
    plain = AuthThrottle(limit=1, window=60, max_addresses=10)
    assert plain.client_address(scope("198.51.100.7", "1.2.3.4")) == "198.51.100.7"
    proxied = AuthThrottle(limit=1, window=60, max_addresses=10, trusted=("10.0.0.0/8", "192.0.2.1"))
    # the right-most entry that is not a trusted proxy: what the outer proxy saw
    assert proxied.client_address(scope("10.1.2.3", "6.6.6.6, 198.51.100.9, 192.0.2.1")) == "198.51.100.9"
    assert proxied.client_address(scope("10.1.2.3", "6.6.6.6", "198.51.100.9")) == "198.51.100.9"
    assert proxied.client_address(scope("10.1.2.3")) == "10.1.2.3"
    # an untrusted peer cannot choose its address by sending the header
    assert proxied.client_address(scope("198.51.100.7", "1.2.3.4")) == "198.51.100.7"


def test_an_ipv6_client_is_counted_per_64_prefix() -> None:
    """Found in review: one subscriber's /64 holds 2^64 addresses to rotate through."""
    throttle = AuthThrottle(limit=3, window=60, max_addresses=10)
    for last in ("1", "2", "abcd"):
        throttle.fail(throttle.client_address(scope(f"2001:db8:1:2::{last}")))
    assert throttle.retry_after(throttle.client_address(scope("2001:db8:1:2::ffff"))) is not None
    assert throttle.retry_after(throttle.client_address(scope("2001:db8:1:3::1"))) is None
    assert throttle.client_address(scope("::ffff:198.51.100.7")) == "198.51.100.7"


def test_a_real_server_ignores_x_forwarded_for_without_a_trusted_proxy(
    own_database: str, tmp_path: Any
) -> None:
    """Found in review: uvicorn's own proxy-header handling trusted X-Forwarded-For from
    127.0.0.1, so rotating the header from loopback escaped the throttle. `ledger serve`
    turns it off: the client is the socket peer unless LEDGER_TRUSTED_PROXIES names it."""
    import httpx

    from tests.conftest import TEST_ENV
    from tests.serving import Server

    env = {**TEST_ENV, "LEDGER_DATABASE_URL": own_database, "LEDGER_AUTH_FAILURE_LIMIT": "3"}
    with Server(env, tmp_path / "serve.log") as server:
        server.wait_ready()
        statuses = [
            httpx.get(
                f"{server.base}/v1/accounts/x/balance",
                headers={**auth("wrong-token-" + "x" * 32), "X-Forwarded-For": f"203.0.113.{i}"},
                timeout=10,
            ).status_code
            for i in range(6)
        ]
    assert statuses == [401, 401, 401, 429, 429, 429]
