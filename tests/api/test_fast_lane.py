"""The fast lane (`ledger.holds.fastlane`) answers exactly as the framework does.

Two apps on one database: `client` (the fast lane on, the default) and `framework`
(`LEDGER_FAST_LANE=0`: every request through Litestar's routing, guards, admission and
handlers). Each request below goes to both, and the answers must be the same: status,
headers in the order sent (but the request id's value and the date) and body, byte for
byte once the hold ids, timestamps and keys that differ between the two calls are masked. The fast lane's own
counter shows which of them it served and which it handed to the framework: every
refusal before the handler is the framework's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from ledger.metrics import REGISTRY
from tests.conftest import ADMIN, GATEWAY, auth, fresh_currency, new_id, publish, simple_document, usage

_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")
_KEY = re.compile(rb"(fast|slow)-[0-9a-f]{8}")
_ROUTES = ("/v1/holds", "/v1/holds/{hold_id}/settle", "/v1/holds/{hold_id}/release")


@pytest.fixture(scope="module")
def framework(settings: Any, sa_url: str) -> Iterator[TestClient[Any]]:
    from ledger.app import create_app

    app = create_app(dataclasses.replace(settings, fast_lane=False), sa_url)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def world(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    currency = fresh_currency()
    version = publish(client, simple_document(currency))
    return {"currency": currency, "version": version, "account": make_account("1", currency=currency)}


def lane(outcome: str) -> float:
    return sum(
        REGISTRY.get_sample_value("ledger_fast_lane_requests_total", {"route": r, "outcome": outcome}) or 0.0
        for r in _ROUTES
    )


def masked(response: Any) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, the headers in the order sent (but the request id's value and the date), body."""
    headers = [
        (name, b"ID" if name.lower() == b"x-request-id" else value)
        for name, value in response.headers.raw
        if name.lower() != b"date"
    ]
    body = _KEY.sub(b"KEY", _TIME.sub(b"TIME", _UUID.sub(b"UUID", response.content)))
    return response.status_code, headers, body


def same(
    fast: TestClient[Any], framework: TestClient[Any], send: Callable[[TestClient[Any], str], Any]
) -> tuple[Any, Any]:
    """`send(client, tag)` to both; their answers must be equal. Returns (fast, framework)."""
    a = send(fast, "fast")
    b = send(framework, "slow")
    assert masked(a) == masked(b), (a.text, b.text)
    return a, b


def key(tag: str) -> str:
    return f"{tag}-{new_id('k')[-8:]}"


def post_reserve(account: str, **extra: Any) -> Callable[[TestClient[Any], str], Any]:
    def send(c: TestClient[Any], tag: str) -> Any:
        body = {"account_id": account, "model": "t-simple", "idempotency_key": key(tag), **extra}
        return c.post("/v1/holds", json=body, headers=auth(GATEWAY))

    return send


def test_reserve_settle_release_are_served_and_answer_as_the_framework(
    client: TestClient[Any], framework: TestClient[Any], world: dict[str, Any]
) -> None:
    served = lane("served")
    settled = {"method": "POST", "route": "/v1/holds/{hold_id}/settle", "status": "200"}
    settles_before = REGISTRY.get_sample_value("ledger_http_requests_total", settled) or 0.0
    a, b = same(client, framework, post_reserve(world["account"], max_output_tokens=100))
    assert a.status_code == 201
    assert a.headers["content-type"] == "application/json"
    holds = {"fast": a.json()["id"], "slow": b.json()["id"]}

    def settle(prompt: int) -> Callable[[TestClient[Any], str], Any]:
        def send(c: TestClient[Any], tag: str) -> Any:
            return c.post(f"/v1/holds/{holds[tag]}/settle", json=usage(prompt, 50), headers=auth(GATEWAY))

        return send

    a, _ = same(client, framework, settle(300))
    assert a.status_code == 200 and a.json()["state"] == "settled"
    a, _ = same(client, framework, settle(300))  # the same settle again: its answer again
    assert a.status_code == 200
    a, _ = same(client, framework, settle(301))  # other usage: the same refusal from both
    assert a.status_code == 409
    # both apps count their settles under the one route label
    assert (REGISTRY.get_sample_value("ledger_http_requests_total", settled) or 0.0) - settles_before == 4

    a, b = same(client, framework, post_reserve(world["account"], max_output_tokens=10))
    holds = {"fast": a.json()["id"], "slow": b.json()["id"]}

    def release(c: TestClient[Any], tag: str) -> Any:
        return c.post(f"/v1/holds/{holds[tag]}/release", headers=auth(GATEWAY))

    a, _ = same(client, framework, release)
    assert a.status_code == 200 and a.json()["state"] == "released"
    a, _ = same(client, framework, release)  # releasing twice is not an error
    assert a.status_code == 200
    # 7 of the calls above went to the fast-lane app, and it served every one of them
    assert lane("served") - served == 7


def test_replay_conflict_and_service_refusals_are_the_same(
    client: TestClient[Any], framework: TestClient[Any], world: dict[str, Any], make_account: Any
) -> None:
    account = world["account"]
    fixed = {"fast": key("fast"), "slow": key("slow")}

    def keyed(tokens: int) -> Callable[[TestClient[Any], str], Any]:
        def send(c: TestClient[Any], tag: str) -> Any:
            body = {"account_id": account, "model": "t-simple", "idempotency_key": fixed[tag]}
            return c.post("/v1/holds", json={**body, "max_output_tokens": tokens}, headers=auth(GATEWAY))

        return send

    assert same(client, framework, keyed(20))[0].status_code == 201
    assert same(client, framework, keyed(20))[0].status_code == 200  # replay
    assert same(client, framework, keyed(21))[0].json()["error"]["code"] == "idempotency_conflict"
    # 402 with the numbers; an account that does not exist; a model the sheet lacks
    assert same(client, framework, post_reserve(account, max_output_tokens=10**9))[0].status_code in (
        402,
        422,
    )
    poor = make_account("0.001", currency=world["currency"])
    assert same(client, framework, post_reserve(poor, max_output_tokens=100))[0].status_code == 402
    assert same(client, framework, post_reserve("acct_nobody_" + new_id()[-6:]))[0].status_code == 404
    missing = post_reserve(account, max_output_tokens=1)

    def no_model(c: TestClient[Any], tag: str) -> Any:
        body = {"account_id": account, "model": "t-missing", "idempotency_key": key(tag)}
        return c.post("/v1/holds", json=body, headers=auth(GATEWAY))

    assert same(client, framework, no_model)[0].status_code == 404
    assert same(client, framework, missing)[0].status_code == 201

    def unknown_hold(c: TestClient[Any], tag: str) -> Any:
        return c.post(
            "/v1/holds/00000000-0000-7000-8000-000000000000/settle", json=usage(1, 1), headers=auth(GATEWAY)
        )

    assert same(client, framework, unknown_hold)[0].status_code == 404

    def bad_hold_id(c: TestClient[Any], tag: str) -> Any:
        return c.post("/v1/holds/not-a-hold/release", headers=auth(GATEWAY))

    assert same(client, framework, bad_hold_id)[0].status_code == 404


def test_catalogue_notice_sunset_and_refusals_are_the_same(
    client: TestClient[Any], framework: TestClient[Any], make_account: Any
) -> None:
    """A retiring model's notice and Sunset header, a retired model's 410 and n above max_n."""
    currency = fresh_currency()
    doc = simple_document(currency, model="t-retiring")
    limits = {k: v for k, v in doc["models"][0].items() if k != "model"}
    doc["models"][0]["retires_at"] = "2099-01-01T00:00:00Z"
    doc["models"].append({"model": "t-retired", **limits, "retires_at": "2020-01-01T00:00:00Z"})
    doc["models"].append({"model": "t-capped", **limits, "max_n": 2, "default_output_tokens": 50})
    publish(client, doc)
    account = make_account("1", currency=currency)
    fixed = {"fast": key("fast"), "slow": key("slow")}

    def send(model: str, **extra: Any) -> Callable[[TestClient[Any], str], Any]:
        def call(c: TestClient[Any], tag: str) -> Any:
            body = {"account_id": account, "model": model, "idempotency_key": fixed[tag], **extra}
            return c.post("/v1/holds", json=body, headers=auth(GATEWAY))

        return call

    served = lane("served")
    a, b = same(client, framework, send("t-retiring", max_output_tokens=10))
    assert a.status_code == 201 and a.json()["notice"]["code"] == "model_retiring"
    assert a.headers["sunset"] == b.headers["sunset"] == "Thu, 01 Jan 2099 00:00:00 GMT"
    a, _ = same(client, framework, send("t-retiring", max_output_tokens=10))  # the replay: 200, the same
    assert a.status_code == 200 and a.headers["sunset"] == "Thu, 01 Jan 2099 00:00:00 GMT"
    holds = {"fast": a.json()["id"], "slow": b.json()["id"]}

    def settle(c: TestClient[Any], tag: str) -> Any:
        return c.post(f"/v1/holds/{holds[tag]}/settle", json=usage(10, 10), headers=auth(GATEWAY))

    a, _ = same(client, framework, settle)
    assert a.status_code == 200 and "notice" not in a.json() and "sunset" not in a.headers
    fixed.update(fast=key("fast"), slow=key("slow"))
    a, _ = same(client, framework, send("t-retired", max_output_tokens=10))
    assert (a.status_code, a.json()["error"]["code"]) == (410, "model_retired")
    assert a.json()["error"]["retires_at"] == "2020-01-01T00:00:00Z" and "sunset" not in a.headers
    a, _ = same(client, framework, send("t-capped", n=3))
    assert (a.status_code, a.json()["error"]["code"], a.json()["error"]["param"]) == (
        422,
        "model_limit_exceeded",
        "n",
    )
    a, _ = same(client, framework, send("t-capped", n=2))  # the default output allowance, twice
    assert a.status_code == 201 and a.json()["reservation"]["output_allowance"] == 50
    assert "notice" not in a.json() and "sunset" not in a.headers
    assert lane("served") - served == 6  # the fast lane answered every one itself


@pytest.mark.parametrize(
    "case",
    [
        "no token",
        "unknown token",
        "admin token",
        "two spaces",
        "no content type",
        "text content type",
        "duplicate key",
        "nul",
        "too deep",
        "unknown field",
        "wrong type",
        "not json",
        "empty body",
        "query parameter",
        "trailing slash",
        "too large",
        "key header differs",
        "bad host",
        "two authorization headers",
        "release with a body",
        "settle without usage",
    ],
)
def test_every_refusal_before_the_handler_is_the_framework_s(
    client: TestClient[Any], framework: TestClient[Any], world: dict[str, Any], case: str
) -> None:
    account = world["account"]
    made = client.post(
        "/v1/holds",
        json={"account_id": account, "model": "t-simple", "idempotency_key": new_id("k")},
        headers=auth(GATEWAY),
    )
    hold_id = made.json()["id"]

    def send(c: TestClient[Any], tag: str) -> Any:
        body = {"account_id": account, "model": "t-simple", "idempotency_key": key(tag)}
        json_type = {"Content-Type": "application/json"}
        gateway = {**auth(GATEWAY), **json_type}
        raw = {
            "duplicate key": b'{"account_id": "%s", "account_id": "x", "model": "t-simple"}'
            % account.encode(),
            "nul": b'{"account_id": "a\\u0000b", "model": "t-simple", "idempotency_key": "k"}',
            "too deep": b'{"metadata": ' + b"[" * 40 + b"]" * 40 + b"}",
            "not json": b"{nope",
            "empty body": b"",
            "too large": b'{"model": "' + b"x" * (2 * 1024 * 1024) + b'"}',
        }
        if case in raw:
            return c.post("/v1/holds", content=raw[case], headers=gateway)
        if case == "no token":
            return c.post("/v1/holds", json=body)
        if case == "unknown token":
            return c.post("/v1/holds", json=body, headers=auth("not-a-token"))
        if case == "admin token":
            return c.post("/v1/holds", json=body, headers=auth(ADMIN))
        if case == "two spaces":
            return c.post("/v1/holds", json=body, headers={"Authorization": f"Bearer  {GATEWAY}"})
        if case == "no content type":
            return c.post("/v1/holds", content=b'{"model": "t-simple"}', headers=auth(GATEWAY))
        if case == "text content type":
            return c.post("/v1/holds", content=b"{}", headers={**auth(GATEWAY), "Content-Type": "text/plain"})
        if case == "unknown field":
            return c.post("/v1/holds", json={**body, "colour": "blue"}, headers=auth(GATEWAY))
        if case == "wrong type":
            return c.post("/v1/holds", json={**body, "max_output_tokens": "100"}, headers=auth(GATEWAY))
        if case == "query parameter":
            return c.post("/v1/holds?dry_run=1", json=body, headers=auth(GATEWAY))
        if case == "trailing slash":
            return c.post("/v1/holds/", json=body, headers=auth(GATEWAY))
        if case == "key header differs":
            return c.post("/v1/holds", json=body, headers={**auth(GATEWAY), "Idempotency-Key": "other"})
        if case == "bad host":
            return c.post("/v1/holds", json=body, headers={**auth(GATEWAY), "Host": "bad host/x"})
        if case == "two authorization headers":
            headers = [("authorization", f"Bearer {GATEWAY}"), ("authorization", f"Bearer {GATEWAY}")]
            return c.post("/v1/holds", json=body, headers=headers)
        if case == "release with a body":
            return c.post(f"/v1/holds/{hold_id}/release", content=b'{"x": 1', headers=gateway)
        if case == "settle without usage":
            return c.post(f"/v1/holds/{hold_id}/settle", json={}, headers=auth(GATEWAY))
        raise AssertionError(case)

    served, handed = lane("served"), lane("handed_off")
    a, _ = same(client, framework, send)
    if case == "trailing slash":
        assert a.status_code == 201  # Litestar's router takes it as /v1/holds
    else:
        assert a.status_code >= 400, a.text
        assert "error" in a.json()
    assert lane("served") == served  # the fast lane answered none of them itself
    assert lane("handed_off") - handed == (0 if case in ("trailing slash", "query parameter") else 1)


def test_request_id_route_metrics_and_the_idempotency_header(
    client: TestClient[Any], framework: TestClient[Any], world: dict[str, Any]
) -> None:
    def count(status: str) -> float:
        labels = {"method": "POST", "route": "/v1/holds", "status": status}
        return REGISTRY.get_sample_value("ledger_http_requests_total", labels) or 0.0

    before = count("201")
    body = {"account_id": world["account"], "model": "t-simple"}
    headers = {**auth(GATEWAY), "X-Request-Id": "trace-123", "Idempotency-Key": key("fast")}
    r = client.post("/v1/holds", json=body, headers=headers)
    assert r.status_code == 201
    assert r.headers["x-request-id"] == "trace-123"
    again = client.post("/v1/holds", json=body, headers=headers)
    assert again.status_code == 200 and again.json()["id"] == r.json()["id"]
    assert count("201") - before == 1
    # the framework counts under the same route label
    r = framework.post("/v1/holds", json=body, headers={**auth(GATEWAY), "Idempotency-Key": key("slow")})
    assert r.status_code == 201
    assert count("201") - before == 2
    assert len(r.headers["x-request-id"]) == 32  # a fresh id when none is sent


def test_a_planned_budget_refusal_is_the_same(
    client: TestClient[Any], framework: TestClient[Any], world: dict[str, Any]
) -> None:
    """402 `budget_exceeded` names the plan that sized the reservation, in both lanes."""
    account, plan_id = world["account"], new_id("plan")
    r = client.post(
        "/admin/v1/plans",
        json={
            "plan_id": plan_id,
            "currency": world["currency"],
            "document": {"adjust_percent": "-10"},
            "reason": "test",
        },
        headers=auth(ADMIN),
    )
    assert r.status_code == 201, r.text
    r = client.put(
        f"/admin/v1/accounts/{account}/plan", json={"plan_id": plan_id, "reason": "test"}, headers=auth(ADMIN)
    )
    assert r.status_code == 200, r.text
    r = client.put(
        f"/admin/v1/accounts/{account}/budgets/proj",
        json={"amount": "0.001", "period": "daily", "reason": "test"},
        headers=auth(ADMIN),
    )
    assert r.status_code in (200, 201), r.text
    answer, _ = same(client, framework, post_reserve(account, budget_key="proj"))
    assert answer.status_code == 402
    assert answer.json()["error"]["plan"] == {"id": plan_id, "revision": 1}
