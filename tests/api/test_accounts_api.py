"""Admin accounts surface and the gateway's balance read, every success and error status."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import ADMIN, FINANCE, GATEWAY, VIEWER, assert_integrity, auth, new_id


def deposit(client: TestClient[Any], account_id: str, amount: str, key: str | None = None) -> Any:
    return client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": key or new_id("k"), "amount": amount, "reference": "wire 42"},
        headers=auth(FINANCE),
    )


def test_create_get_and_list_account(client: TestClient[Any]) -> None:
    account_id = new_id()
    r = client.post(
        "/admin/v1/accounts",
        json={"account_id": account_id, "credit_limit": "5.25", "metadata": {"team": "research"}},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201
    body = r.json()
    assert body == {
        "account_id": account_id,
        "currency": "USD",
        "credit_limit": "5.25",
        "balance": "0",
        "paid": "0",
        "granted": "0",
        "held": "0",
        "available": "5.25",
        "metadata": {"team": "research"},
        "created_at": body["created_at"],
        "frozen": False,
        "frozen_at": None,
        "frozen_reason": None,
        "review": None,
        "plan": None,
    }
    assert client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER)).json() == body
    # pagination visits every account exactly once
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/admin/v1/accounts", params=params, headers=auth(VIEWER)).json()
        seen += [a["account_id"] for a in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert account_id in seen
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)


def test_create_account_conflict_and_validation(client: TestClient[Any]) -> None:
    account_id = new_id()
    assert (
        client.post("/admin/v1/accounts", json={"account_id": account_id}, headers=auth(ADMIN)).status_code
        == 201
    )
    r = client.post("/admin/v1/accounts", json={"account_id": account_id}, headers=auth(FINANCE))
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "account_exists"
    cases = [
        ({"account_id": "bad id"}, "account_id"),
        ({"account_id": "system:revenue"}, "account_id"),
        ({"account_id": new_id(), "currency": "usd"}, "currency"),
        ({"account_id": new_id(), "credit_limit": "-1"}, "credit_limit"),
        ({"account_id": new_id(), "credit_limit": 5}, "credit_limit"),
        ({"account_id": new_id(), "credit_limit": "1e3"}, "credit_limit"),
        ({"account_id": new_id(), "colour": "red"}, "colour"),
        ({}, "account_id"),
    ]
    for body, param in cases:
        r = client.post("/admin/v1/accounts", json=body, headers=auth(FINANCE))
        assert r.status_code == 422, (body, r.text)
        err = r.json()["error"]
        assert err["code"] == "validation_error"
        assert err["param"] == param, (body, err)


def test_deposit_balance_transactions_and_integrity(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account()
    r = deposit(client, account_id, "10.50", key="dep-1")
    assert r.status_code == 201
    assert r.json()["balance"] == "10.5"
    assert r.json()["amount"] == "10.5"
    # same key, same body: the same answer, nothing written twice
    again = deposit(client, account_id, "10.50", key="dep-1")
    assert again.status_code == 200
    assert again.json() == r.json()
    # same key, different body
    conflict = deposit(client, account_id, "10.51", key="dep-1")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_conflict"
    balance = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
    assert balance["balance"] == "10.5"
    assert balance["available"] == "10.5"
    assert balance["held"] == "0"
    r = client.post(
        f"/admin/v1/accounts/{account_id}/adjustments",
        json={"idempotency_key": "adj-1", "amount": "-0.000000000001", "reason": "rounding test"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201
    assert r.json()["balance"] == "10.499999999999"
    page = client.get(f"/admin/v1/accounts/{account_id}/transactions", headers=auth(VIEWER)).json()
    assert [t["kind"] for t in page["data"]] == ["adjustment", "deposit"]
    assert [t["balance_after"] for t in page["data"]] == ["10.499999999999", "10.5"]
    assert page["data"][0]["reason"] == "rounding test"
    assert page["data"][1]["reference"] == "wire 42"
    assert {e["account_id"] for e in page["data"][1]["entries"]} == {account_id, "system:funding:USD"}
    assert_integrity(client)


def test_transactions_cursor_pagination(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account()
    for i in range(7):
        assert deposit(client, account_id, f"{i + 1}").status_code == 201
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = client.get(
            f"/admin/v1/accounts/{account_id}/transactions", params=params, headers=auth(VIEWER)
        )
        assert page.status_code == 200
        body = page.json()
        seen += [t["balance_after"] for t in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == ["28", "21", "15", "10", "6", "3", "1"]
    bad = client.get(f"/admin/v1/accounts/{account_id}/transactions?cursor=zz", headers=auth(VIEWER))
    assert bad.status_code == 422
    assert bad.json()["error"]["param"] == "cursor"


def test_balance_as_of(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("3")
    r = client.get(
        f"/admin/v1/accounts/{account_id}/balance",
        params={"as_of": "2000-01-01T00:00:00Z"},
        headers=auth(VIEWER),
    )
    assert r.status_code == 200
    assert r.json()["balance"] == "0"
    r = client.get(
        f"/admin/v1/accounts/{account_id}/balance",
        params={"as_of": "2999-01-01T00:00:00Z"},
        headers=auth(VIEWER),
    )
    assert r.json()["balance"] == "3"
    r = client.get(
        f"/admin/v1/accounts/{account_id}/balance", params={"as_of": "yesterday"}, headers=auth(VIEWER)
    )
    assert r.status_code == 422
    assert r.json()["error"]["param"] == "as_of"


def test_deposit_and_adjustment_refusals_change_nothing(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("1")
    cases = [
        ("deposits", {"idempotency_key": "x", "amount": "0"}, 422, "amount"),
        ("deposits", {"idempotency_key": "x", "amount": "-5"}, 422, "amount"),
        ("deposits", {"idempotency_key": "x", "amount": 5}, 422, "amount"),
        ("deposits", {"idempotency_key": "x", "amount": 5.5}, 422, "amount"),
        ("deposits", {"idempotency_key": "x", "amount": "0.0000000000001"}, 422, "amount"),
        ("deposits", {"idempotency_key": "x", "amount": "NaN"}, 422, "amount"),
        ("deposits", {"idempotency_key": "", "amount": "1"}, 422, "idempotency_key"),
        ("deposits", {"amount": "1"}, 422, "idempotency_key"),
        ("adjustments", {"idempotency_key": "y", "amount": "1"}, 422, "reason"),
        ("adjustments", {"idempotency_key": "y", "amount": "1", "reason": "  "}, 422, "reason"),
        ("adjustments", {"idempotency_key": "y", "amount": "0", "reason": "r"}, 422, "amount"),
    ]
    for path, body, status, param in cases:
        r = client.post(f"/admin/v1/accounts/{account_id}/{path}", json=body, headers=auth(FINANCE))
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.json())
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        content=b"{not json",
        headers={**auth(FINANCE), "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        content=b"",
        headers={**auth(FINANCE), "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    missing = client.post(
        "/admin/v1/accounts/nobody-here/deposits",
        json={"idempotency_key": "z", "amount": "1"},
        headers=auth(FINANCE),
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "account_not_found"
    txns = client.get(f"/admin/v1/accounts/{account_id}/transactions", headers=auth(VIEWER)).json()["data"]
    assert len(txns) == 1
    assert client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()["balance"] == "1"


@pytest.mark.parametrize(
    ("method", "path", "token", "status"),
    [
        ("GET", "/v1/accounts/{a}/balance", None, 401),
        ("GET", "/v1/accounts/{a}/balance", "nope", 401),
        ("GET", "/v1/accounts/{a}/balance", ADMIN, 403),
        ("GET", "/v1/accounts/{a}/balance", GATEWAY, 200),
        ("GET", "/admin/v1/accounts/{a}", GATEWAY, 403),
        ("GET", "/admin/v1/accounts/{a}", None, 401),
        ("GET", "/admin/v1/accounts/{a}", VIEWER, 200),
        ("POST", "/admin/v1/accounts/{a}/deposits", VIEWER, 403),
        ("POST", "/admin/v1/accounts/{a}/deposits", GATEWAY, 403),
        ("POST", "/admin/v1/accounts/{a}/adjustments", VIEWER, 403),
        ("GET", "/admin/v1/integrity", GATEWAY, 403),
        ("GET", "/admin/v1/integrity", VIEWER, 200),
        ("GET", "/admin/v1/audit-log", VIEWER, 200),
    ],
)
def test_auth_matrix(
    client: TestClient[Any], make_account: Any, method: str, path: str, token: str | None, status: int
) -> None:
    account_id = make_account()
    headers = auth(token) if token else {}
    r = client.request(method, path.format(a=account_id), headers=headers, json={})
    assert r.status_code == status, r.text
    if status >= 400:
        err = r.json()["error"]
        assert err["code"] == {401: "unauthorized", 403: "forbidden"}[status]
        assert set(err) >= {"type", "code", "message", "param"}


def test_malformed_authorization_header(client: TestClient[Any]) -> None:
    for header in ("Basic abc", "Bearer", "Bearer   ", GATEWAY):
        r = client.get("/v1/accounts/x/balance", headers={"Authorization": header})
        assert r.status_code == 401, header


def test_not_found_shapes(client: TestClient[Any]) -> None:
    r = client.get("/v1/accounts/nobody/balance", headers=auth(GATEWAY))
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "account_not_found"
    r = client.get("/admin/v1/accounts/nobody/transactions", headers=auth(VIEWER))
    assert r.status_code == 404
    r = client.get("/no/such/route")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "route_not_found"


def test_audit_log_records_identity_not_token(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account()
    client.post(
        f"/admin/v1/accounts/{account_id}/adjustments",
        json={"idempotency_key": "a", "amount": "2", "reason": "promo credit"},
        headers=auth(FINANCE),
    )
    page = client.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER)).json()
    actions = [e["action"] for e in page["data"]]
    assert actions == ["account.adjustment", "account.create"]
    entry = page["data"][0]
    assert entry["reason"] == "promo credit"
    assert entry["role"] == "finance"
    assert entry["actor"].startswith("finance:")
    assert FINANCE not in str(page)
    assert entry["details"]["amount"] == "2"


def test_operations_endpoints(client: TestClient[Any]) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    client.get("/v1/accounts/x/balance", headers=auth(GATEWAY))
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert (
        'ledger_http_requests_total{method="GET",route="/v1/accounts/{account_id}/balance",status="404"}'
        in (metrics.text)
    )
    assert "ledger_http_request_duration_seconds_bucket" in metrics.text
    schema = client.get("/schema/openapi.json")
    assert schema.status_code == 200
    assert "/admin/v1/accounts/{account_id}/deposits" in schema.json()["paths"]
    assert client.get("/schema").status_code == 200
    assert client.get("/healthz").headers.get("x-request-id")


def test_database_outage_is_503(settings: Any) -> None:
    from ledger.app import create_app

    dead = create_app(settings, "postgresql+psycopg://postgres@127.0.0.1:1/none")
    with TestClient(dead) as c:
        r = c.get("/v1/accounts/x/balance", headers=auth(GATEWAY))
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "database_unavailable"
        r = c.post("/admin/v1/accounts", json={"account_id": "x"}, headers=auth(FINANCE))
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "database_unavailable"
        assert c.get("/readyz").status_code == 503
        assert c.get("/healthz").status_code == 200


def test_the_first_accounts_of_a_currency_opened_at_once_all_succeed(
    own_database: str, tmp_path: Any
) -> None:
    """Each opening makes sure its currency's system accounts exist; openings racing for the
    first ones must each find them made, never fail on the accounts' second unique index
    (a 500 that `make bench`'s setup met about one run in three)."""
    import asyncio

    import httpx

    from tests.conftest import FINANCE, TEST_ENV, auth, fresh_currency, new_id
    from tests.serving import Server

    async def open_all(base: str, currency: str) -> list[int]:
        async with httpx.AsyncClient(base_url=base, headers=auth(FINANCE), timeout=30) as http:

            async def one() -> int:
                body = {"account_id": new_id(), "currency": currency}
                return (await http.post("/admin/v1/accounts", json=body)).status_code

            return list(await asyncio.gather(*(one() for _ in range(16))))

    with Server({**TEST_ENV, "LEDGER_DATABASE_URL": own_database}, tmp_path / "serve.log") as server:
        server.wait_ready()
        statuses = [asyncio.run(open_all(server.base, fresh_currency())) for _ in range(8)]
        server.assert_no_tracebacks()
    assert {status for run in statuses for status in run} == {201}
