"""The gateway's hold calls and the admin's hold tools: every path and every error status.

Prices: each test publishes its own simple sheet in a currency no other test uses
(input 2, output 10 per 1M; max input 1000, max output 500), so the amounts below
are computed by hand: reserving with max_output_tokens O holds
1000 x 2 / 1e6 + O x 10 / 1e6 = 0.002 + O x 0.00001.
"""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from tests.conftest import (
    FINANCE,
    GATEWAY,
    VIEWER,
    assert_integrity,
    auth,
    balance,
    call,
    fresh_currency,
    new_id,
    publish,
    reserve,
    simple_document,
    usage,
)


def test_reserve_settle_releases_the_rest(client: TestClient[Any], world: dict[str, Any]) -> None:
    r = reserve(client, world["account"], max_output_tokens=100, metadata={"request": "abc"})
    assert r.status_code == 201
    hold = r.json()
    assert hold["state"] == "open"
    assert hold["amount"] == "0.003"
    assert hold["price_version"] == world["version"]
    assert hold["currency"] == world["currency"]
    assert hold["reservation"] == {
        "input_allowance": 1000,
        "output_allowance": 100,
        "n": 1,
        "input_rate": "2",
        "output_rate": "10",
        "tier": "standard",
        "amount": "0.003",
    }
    assert hold["metadata"] == {"request": "abc"}
    assert balance(client, world["account"]) == {"balance": "1", "held": "0.003", "available": "0.997"}
    r = call(client, hold["id"], "settle", usage(300, 50, total_tokens=350, service_tier="default"))
    assert r.status_code == 200
    settled = r.json()
    # 300 x 2/1e6 + 50 x 10/1e6 = 0.0006 + 0.0005
    assert settled["charge"] == {
        "amount": "0.0011",
        "tier": "standard",
        "lines": [
            {"category": "input", "tokens": 300, "rate": "2", "amount": "0.0006"},
            {"category": "output", "tokens": 50, "rate": "10", "amount": "0.0005"},
        ],
    }
    assert settled["state"] == "settled"
    assert settled["released"] == "0.0019"
    assert settled["overage"] == "0"
    assert settled["resolved_by"] == "gateway"
    assert settled["usage"]["service_tier"] == "default"  # unpriced fields are kept as sent
    assert balance(client, world["account"]) == {"balance": "0.9989", "held": "0", "available": "0.9989"}
    got = client.get(f"/v1/holds/{hold['id']}", headers=auth(GATEWAY)).json()
    assert got == settled
    assert_integrity(client)


def test_reserve_is_idempotent(client: TestClient[Any], world: dict[str, Any]) -> None:
    body = {"account_id": world["account"], "idempotency_key": "same-key", "model": "t-simple", "n": 2}
    first = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert first.status_code == 201
    again = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert again.status_code == 200
    assert again.json() == first.json()
    other = client.post("/v1/holds", json={**body, "n": 3}, headers=auth(GATEWAY))
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    # n=2 with the model's max output 500: 0.002 + 2 x 500 x 10/1e6 = 0.012
    assert first.json()["amount"] == "0.012"
    assert balance(client, world["account"])["held"] == "0.012"


def test_insufficient_funds_holds_nothing(client: TestClient[Any], world: dict[str, Any]) -> None:
    r = reserve(client, world["account"], max_output_tokens=100, n=100)  # 0.002 + 0.1 = 0.102
    assert r.status_code == 201
    r = client.post(
        "/v1/holds",
        json={
            "account_id": world["account"],
            "idempotency_key": "big",
            "model": "t-simple",
            "max_output_tokens": 500,
            "n": 128,
        },  # 0.002 + 0.64 = 0.642 > 0.898? no: fits
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201
    r = client.post(
        "/v1/holds",
        json={
            "account_id": world["account"],
            "idempotency_key": "too-big",
            "model": "t-simple",
            "max_output_tokens": 500,
            "n": 60,
        },  # 0.002 + 0.3 = 0.302 > available 0.256
        headers=auth(GATEWAY),
    )
    assert r.status_code == 402
    err = r.json()["error"]
    assert err["code"] == "insufficient_funds"
    assert err["required"] == "0.302"
    assert err["available"] == "0.256"
    assert err["reservation"]["output_allowance"] == 500
    assert err["reservation"]["n"] == 60
    assert "0.302" in err["message"] and "0.256" in err["message"]
    assert balance(client, world["account"]) == {"balance": "1", "held": "0.744", "available": "0.256"}
    # the refused key was not consumed: the same key can be used once funds allow
    r = client.post(
        "/v1/holds",
        json={
            "account_id": world["account"],
            "idempotency_key": "too-big",
            "model": "t-simple",
            "max_output_tokens": 10,
        },
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201


def test_credit_limit_extends_available(
    client: TestClient[Any], make_account: Any, world: dict[str, Any]
) -> None:
    account_id = make_account(None, credit_limit="0.01", currency=world["currency"])
    r = reserve(client, account_id, max_output_tokens=500)  # 0.007
    assert r.status_code == 201
    assert balance(client, account_id) == {"balance": "0", "held": "0.007", "available": "0.003"}
    assert reserve(client, account_id, max_output_tokens=500).status_code == 402


def test_reserve_refusals(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    cases = [
        ({"account_id": "nobody"}, 404, "account_not_found"),
        ({"model": "unknown-model"}, 404, "model_not_found"),
        ({"model": "gemini-3.5-flash"}, 503, "pricing_unavailable"),  # known, deliberately unpriced
        ({"max_output_tokens": 501}, 422, "model_limit_exceeded"),
        ({"price_version": "v999999"}, 404, "price_version_not_found"),
        ({"ttl_seconds": 0}, 422, "validation_error"),
        ({"ttl_seconds": 86401}, 422, "validation_error"),
        ({"n": 0}, 422, "validation_error"),
        ({"max_output_tokens": "100"}, 422, "validation_error"),
        ({"temperature": 1}, 422, "validation_error"),
    ]
    for fields, status, code in cases:
        body = {"account_id": account_id, "idempotency_key": new_id("r"), "model": "t-simple", **fields}
        r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
        assert r.status_code == status, (fields, r.text)
        assert r.json()["error"]["code"] == code, (fields, r.json())
    assert (
        client.post(
            "/v1/holds", content=b"{", headers={**auth(GATEWAY), "Content-Type": "application/json"}
        ).status_code
        == 400
    )
    # a currency with no price version at all
    r = client.post(
        "/admin/v1/accounts",
        json={"account_id": new_id(), "currency": fresh_currency()},
        headers=auth(FINANCE),
    )
    body = {"account_id": r.json()["account_id"], "idempotency_key": "k", "model": "t-simple"}
    r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "pricing_unavailable"
    assert balance(client, account_id) == {"balance": "1", "held": "0", "available": "1"}


def test_max_input_tokens_lowers_the_reservation(client: TestClient[Any], world: dict[str, Any]) -> None:
    r = reserve(client, world["account"], max_input_tokens=100, max_output_tokens=10)
    assert r.json()["amount"] == "0.0003"  # 100 x 2/1e6 + 10 x 10/1e6
    r = reserve(client, world["account"], max_input_tokens=5000, max_output_tokens=10)
    assert r.json()["reservation"]["input_allowance"] == 1000  # clamped to the model's


def test_checkpoints_grow_and_extend_expiry(client: TestClient[Any], world: dict[str, Any]) -> None:
    hold = reserve(client, world["account"], ttl_seconds=30).json()
    r = call(client, hold["id"], "usage", usage(100, 5))
    assert r.status_code == 200
    first = r.json()
    assert first["usage"] == {"prompt_tokens": 100, "completion_tokens": 5}
    assert first["expires_at"] >= hold["expires_at"]
    assert first["charge"] is None
    assert balance(client, world["account"])["balance"] == "1"  # nothing charged yet
    r = call(client, hold["id"], "usage", usage(100, 4))
    assert r.status_code == 422
    assert r.json()["error"] == {
        "type": "invalid_request",
        "code": "usage_invalid",
        "message": r.json()["error"]["message"],
        "param": "usage.completion_tokens",
    }
    r = call(client, hold["id"], "usage", usage(100, 9))
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 9
    bad = call(client, hold["id"], "usage", usage(10, 1, prompt_tokens_details={"cached_tokens": 20}))
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "usage_invalid"
    assert (
        call(
            client, hold["id"], "usage", {"usage": {"prompt_tokens": -1, "completion_tokens": 1}}
        ).status_code
        == 422
    )
    assert call(client, hold["id"], "usage", {}).status_code == 422


def test_settle_repeat_conflict_and_release_rules(client: TestClient[Any], world: dict[str, Any]) -> None:
    hold = reserve(client, world["account"], max_output_tokens=100).json()
    first = call(client, hold["id"], "settle", usage(10, 10))
    assert first.status_code == 200
    again = call(client, hold["id"], "settle", usage(10, 10))
    assert again.status_code == 200
    assert again.json() == first.json()
    different = call(client, hold["id"], "settle", usage(10, 11))
    assert different.status_code == 409
    assert different.json()["error"]["code"] == "hold_state_conflict"
    assert call(client, hold["id"], "release").status_code == 409
    assert call(client, hold["id"], "usage", usage(10, 12)).status_code == 409
    assert call(client, hold["id"], "interrupt").status_code == 409
    # 10 x 2 + 10 x 10 = 120 / 1e6
    assert balance(client, world["account"]) == {"balance": "0.99988", "held": "0", "available": "0.99988"}

    released = reserve(client, world["account"]).json()
    r = call(client, released["id"], "release")
    assert r.status_code == 200
    assert r.json()["state"] == "released"
    assert r.json()["released"] == released["amount"]
    assert r.json()["charge"] is None
    assert call(client, released["id"], "release").json() == r.json()
    conflict = call(client, released["id"], "settle", usage(1, 1))
    assert conflict.status_code == 409
    assert balance(client, world["account"]) == {"balance": "0.99988", "held": "0", "available": "0.99988"}
    assert_integrity(client)


def test_overage_goes_below_zero(client: TestClient[Any], make_account: Any, world: dict[str, Any]) -> None:
    account_id = make_account("0.0005", currency=world["currency"])
    hold = reserve(client, account_id, max_input_tokens=100, max_output_tokens=10).json()
    assert hold["amount"] == "0.0003"
    r = call(client, hold["id"], "settle", usage(1000, 500))  # 0.002 + 0.005 = 0.007
    assert r.status_code == 200
    body = r.json()
    assert body["charge"]["amount"] == "0.007"
    assert body["overage"] == "0.0067"
    assert body["released"] == "0"
    assert balance(client, account_id) == {"balance": "-0.0065", "held": "0", "available": "-0.0065"}
    assert reserve(client, account_id, max_output_tokens=1).status_code == 402
    assert_integrity(client)


def test_interrupt_keeps_the_hold_then_settles(client: TestClient[Any], world: dict[str, Any]) -> None:
    hold = reserve(client, world["account"], max_output_tokens=100).json()
    call(client, hold["id"], "usage", usage(100, 10))
    r = call(client, hold["id"], "interrupt", usage(100, 20))
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "interrupted"
    assert body["interrupted_at"] is not None
    assert body["usage"]["completion_tokens"] == 20
    assert balance(client, world["account"])["held"] == "0.003"
    assert call(client, hold["id"], "interrupt", usage(100, 19)).status_code == 422
    empty = client.post(f"/v1/holds/{hold['id']}/interrupt", headers=auth(GATEWAY))
    assert empty.status_code == 200
    assert empty.json()["usage"]["completion_tokens"] == 20
    assert call(client, hold["id"], "usage", usage(100, 30)).status_code == 409
    settled = call(client, hold["id"], "settle", usage(100, 25))
    assert settled.status_code == 200
    assert settled.json()["charge"]["amount"] == "0.00045"
    assert settled.json()["interrupted_at"] == body["interrupted_at"]
    assert balance(client, world["account"]) == {"balance": "0.99955", "held": "0", "available": "0.99955"}


def test_pinned_version_survives_a_newer_one(client: TestClient[Any], world: dict[str, Any]) -> None:
    hold = reserve(client, world["account"], max_output_tokens=10).json()
    newer = publish(client, simple_document(world["currency"], input_rate="4", output_rate="20"))
    assert newer != hold["price_version"]
    fresh = reserve(client, world["account"], max_output_tokens=10).json()
    assert fresh["price_version"] == newer
    assert fresh["amount"] == "0.0042"  # 1000 x 4 + 10 x 20
    r = call(client, hold["id"], "settle", usage(100, 10))
    assert r.json()["price_version"] == world["version"]
    assert r.json()["charge"]["amount"] == "0.0003"  # old rates: 100 x 2 + 10 x 10
    pinned = reserve(client, world["account"], max_output_tokens=10, price_version=world["version"]).json()
    assert pinned["price_version"] == world["version"]
    assert pinned["amount"] == "0.0021"


def test_hold_not_found_and_auth(client: TestClient[Any]) -> None:
    for ref in ("not-a-uuid", "00000000-0000-7000-8000-000000000000"):
        r = client.get(f"/v1/holds/{ref}", headers=auth(GATEWAY))
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "hold_not_found"
        assert call(client, ref, "settle", usage(1, 1)).status_code == 404
        assert call(client, ref, "release").status_code == 404
    assert client.post("/v1/holds", json={}, headers=auth(FINANCE)).status_code == 403
    assert client.post("/v1/holds", json={}).status_code == 401


def test_admin_force_settle_release_and_late_true_up(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    a = reserve(client, account_id, max_output_tokens=100).json()
    call(client, a["id"], "usage", usage(100, 10))  # 0.0003 seen so far
    r = client.post(f"/admin/v1/holds/{a['id']}/settle", json={"reason": "stream lost"}, headers=auth(VIEWER))
    assert r.status_code == 403
    r = client.post(f"/admin/v1/holds/{a['id']}/settle", json={}, headers=auth(FINANCE))
    assert r.status_code == 422
    assert r.json()["error"]["param"] == "reason"
    r = client.post(
        f"/admin/v1/holds/{a['id']}/settle", json={"reason": "stream lost"}, headers=auth(FINANCE)
    )
    assert r.status_code == 200
    body = r.json()
    assert body["resolved_by"] == "admin"
    assert body["resolved_reason"] == "stream lost"
    assert body["charge"]["amount"] == "0.0003"
    # the gateway's authoritative settle arrives late: trued up to 100 x 2 + 40 x 10 = 0.0006
    late = call(client, a["id"], "settle", usage(100, 40))
    assert late.status_code == 200
    assert late.json()["charge"]["amount"] == "0.0006"
    assert late.json()["true_up"] == "0.0003"
    assert late.json()["resolved_by"] == "admin"
    assert call(client, a["id"], "settle", usage(100, 40)).json() == late.json()
    assert call(client, a["id"], "settle", usage(100, 41)).status_code == 409

    b = reserve(client, account_id, max_output_tokens=100).json()
    r = client.post(
        f"/admin/v1/holds/{b['id']}/release", json={"reason": "customer dispute"}, headers=auth(FINANCE)
    )
    assert r.status_code == 200
    assert r.json()["state"] == "released"
    assert r.json()["resolved_by"] == "admin"
    late = call(client, b["id"], "settle", usage(50, 5))  # 0.0001 + 0.00005
    assert late.status_code == 200
    assert late.json()["state"] == "settled"
    assert late.json()["charge"]["amount"] == "0.00015"
    assert late.json()["true_up"] == "0.00015"
    r = client.post(f"/admin/v1/holds/{b['id']}/settle", json={"reason": "again"}, headers=auth(FINANCE))
    assert r.status_code == 409
    # 1 - 0.0006 - 0.00015
    assert balance(client, account_id) == {"balance": "0.99925", "held": "0", "available": "0.99925"}

    c = reserve(client, account_id).json()
    r = client.post(f"/admin/v1/holds/{c['id']}/settle", json={"reason": "no usage"}, headers=auth(FINANCE))
    assert r.status_code == 422  # nothing seen and nothing given
    r = client.post(
        f"/admin/v1/holds/{c['id']}/settle",
        json={"reason": "from logs", **usage(10, 1)},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200
    assert r.json()["charge"]["amount"] == "0.00003"

    audit = client.get("/admin/v1/audit-log", params={"target": a["id"]}, headers=auth(VIEWER)).json()["data"]
    assert [e["action"] for e in audit] == ["hold.settle"]
    assert audit[0]["reason"] == "stream lost"
    journal = client.get(
        f"/admin/v1/accounts/{account_id}/transactions", params={"limit": 100}, headers=auth(VIEWER)
    ).json()["data"]
    kinds = [t["kind"] for t in journal if t["hold_id"] in (a["id"], b["id"])]
    assert sorted(kinds) == sorted(["reserve", "settle", "true_up", "reserve", "release", "true_up"])
    assert_integrity(client)


def test_admin_lists_holds_by_state_account_and_age(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    open_hold = reserve(client, account_id).json()
    released = reserve(client, account_id).json()
    call(client, released["id"], "release")
    r = client.get(
        "/admin/v1/holds", params={"account_id": account_id, "state": "open"}, headers=auth(VIEWER)
    )
    assert r.status_code == 200
    assert [h["id"] for h in r.json()["data"]] == [open_hold["id"]]
    r = client.get("/admin/v1/holds", params={"account_id": account_id}, headers=auth(VIEWER))
    assert [h["id"] for h in r.json()["data"]] == [open_hold["id"], released["id"]]
    r = client.get(
        "/admin/v1/holds", params={"account_id": account_id, "older_than_seconds": 3600}, headers=auth(VIEWER)
    )
    assert r.json()["data"] == []
    page = client.get(
        "/admin/v1/holds", params={"account_id": account_id, "limit": 1}, headers=auth(VIEWER)
    ).json()
    assert len(page["data"]) == 1 and page["next_cursor"]
    page2 = client.get(
        "/admin/v1/holds",
        params={"account_id": account_id, "limit": 1, "cursor": page["next_cursor"]},
        headers=auth(VIEWER),
    ).json()
    assert [h["id"] for h in page2["data"]] == [released["id"]]
    assert client.get("/admin/v1/holds", params={"state": "bogus"}, headers=auth(VIEWER)).status_code == 422
    assert (
        client.get(f"/admin/v1/holds/{open_hold['id']}", headers=auth(VIEWER)).json()["id"] == open_hold["id"]
    )


def test_contract_example_usage_on_claude(
    client: TestClient[Any], make_account: Any, contract_version: str
) -> None:
    account_id = make_account("20")
    r = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": "c1",
            "model": "claude-sonnet-4-6",
            "max_output_tokens": 1000,
            "price_version": contract_version,
        },
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201
    # input side: the highest of 3, 0.3, 3.75, 6 -> 6 x 1,000,000 / 1e6 = 6; output 1000 x 15 / 1e6
    assert r.json()["amount"] == "6.015"
    settle = call(
        client,
        r.json()["id"],
        "settle",
        usage(
            12000,
            800,
            prompt_tokens_details={"cached_tokens": 2000, "cache_write_tokens": 3000},
            completion_tokens_details={"reasoning_tokens": 300},
            claude_cache_creation_5_m_tokens=1000,
            claude_cache_creation_1_h_tokens=2000,
        ),
    )
    assert settle.status_code == 200
    assert settle.json()["charge"]["amount"] == "0.04935"
    assert balance(client, account_id) == {"balance": "19.95065", "held": "0", "available": "19.95065"}


def test_free_model_moves_no_money(client: TestClient[Any], make_account: Any) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency, input_rate="0", output_rate="0"))
    account_id = make_account("1", currency=currency)
    hold = reserve(client, account_id).json()
    assert hold["amount"] == "0"
    settled = call(client, hold["id"], "settle", usage(100, 10))
    assert settled.status_code == 200
    assert settled.json()["charge"]["amount"] == "0"
    assert balance(client, account_id) == {"balance": "1", "held": "0", "available": "1"}
    journal = client.get(f"/admin/v1/accounts/{account_id}/transactions", headers=auth(VIEWER)).json()["data"]
    assert [t["kind"] for t in journal] == ["deposit"]  # zero legs: no reserve or settle transaction
    assert_integrity(client)
