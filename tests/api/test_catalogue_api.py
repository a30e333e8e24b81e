"""The catalogue fields over HTTP: a default output allowance, an `n` cap and a model's retirement.

One sheet in a currency of its own (rates 2 in / 10 out per 1M tokens, 1,000 input and 500
output tokens at most):
- `c-default`: `default_output_tokens` 100, `max_n` 2. Reserving without an output limit
  holds 1000 x 2 / 1e6 + 100 x 10 / 1e6 = 0.003, not 1000 x 2 / 1e6 + 500 x 10 / 1e6 = 0.007;
- `c-retiring`: `retires_at` 2099-01-01: reserves and quotes carry a notice and `Sunset`;
- `c-retired`: `retires_at` 2020-01-01: reserves and quotes are 410 `model_retired`.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import (
    FINANCE,
    GATEWAY,
    assert_integrity,
    auth,
    balance,
    fresh_currency,
    new_id,
    publish,
    reserve,
    usage,
)

RATES = {"input": "2", "output": "10"}
LIMITS = {"max_input_tokens": 1000, "max_output_tokens": 500, "rates": RATES}
RETIRING = {
    "code": "model_retiring",
    "message": "c-retiring retires at 2099-01-01T00:00:00Z; requests for it are refused from then on",
    "retires_at": "2099-01-01T00:00:00Z",
}
SUNSET = "Thu, 01 Jan 2099 00:00:00 GMT"


def sheet(currency: str, **retiring: Any) -> dict[str, Any]:
    return {
        "currency": currency,
        "source": "catalogue test sheet",
        "models": [
            {"model": "c-default", "default_output_tokens": 100, "max_n": 2, **LIMITS},
            {"model": "c-retiring", "retires_at": "2099-01-01T00:00:00Z", **LIMITS, **retiring},
            {"model": "c-retired", "retires_at": "2020-01-01T01:00:00+01:00", **LIMITS},
            {"model": "c-plain", **LIMITS},
        ],
    }


@pytest.fixture
def world(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    currency = fresh_currency()
    version = publish(client, sheet(currency))
    return {"currency": currency, "version": version, "account": make_account("1", currency=currency)}


def quote(client: TestClient[Any], currency: str, model: str, **fields: Any) -> Any:
    body = {"model": model, "currency": currency, **fields}
    return client.post("/v1/quotes", json=body, headers=auth(GATEWAY))


def test_an_omitted_output_limit_reserves_the_model_s_default(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    r = reserve(client, world["account"], "c-default")
    assert r.status_code == 201, r.text
    hold = r.json()
    assert (hold["reservation"]["output_allowance"], hold["amount"]) == (100, "0.003")
    assert "notice" not in hold and "sunset" not in r.headers
    assert balance(client, world["account"])["held"] == "0.003"
    # the request's own limit still wins; n multiplies the default
    assert reserve(client, world["account"], "c-default", max_output_tokens=300).json()["amount"] == "0.005"
    assert reserve(client, world["account"], "c-default", n=2).json()["amount"] == "0.004"
    # a model without a default reserves its maximum, as before
    assert reserve(client, world["account"], "c-plain").json()["amount"] == "0.007"
    # the quote sizes it as the reserve does
    q = quote(client, world["currency"], "c-default")
    assert q.status_code == 200, q.text
    assert q.json()["reservation"]["output_allowance"] == 100
    assert q.json()["reservation"]["amount"] == "0.003"
    assert "notice" not in q.json() and "sunset" not in q.headers
    # settling at the model's maximum is still accepted: the default sizes the hold, not the limit
    s = client.post(f"/v1/holds/{hold['id']}/settle", json=usage(1000, 500), headers=auth(GATEWAY))
    assert s.status_code == 200, s.text
    assert (s.json()["charge"]["amount"], s.json()["overage"]) == ("0.007", "0.004")
    assert_integrity(client)


def test_n_above_max_n_is_refused_and_holds_nothing(client: TestClient[Any], world: dict[str, Any]) -> None:
    account = world["account"]
    before = balance(client, account)
    key = new_id("k")
    r = reserve(client, account, "c-default", key=key, max_output_tokens=10, n=3)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("model_limit_exceeded", "n")
    assert "3 is above the model's limit of 2 completions" in error["message"]
    assert balance(client, account) == before
    # nothing was recorded under the key: the same key with n = 2 creates the hold
    again = reserve(client, account, "c-default", key=key, max_output_tokens=10, n=2)
    assert again.status_code == 201, again.text
    q = quote(client, world["currency"], "c-default", max_output_tokens=10, n=3)
    assert q.status_code == 422 and q.json()["error"]["param"] == "n"
    # a model without max_n keeps the global range
    assert reserve(client, account, "c-plain", max_output_tokens=1, n=128).status_code == 201


def test_a_hold_s_usage_is_bounded_by_its_own_n(client: TestClient[Any], world: dict[str, Any]) -> None:
    hold = reserve(client, world["account"], "c-default", max_output_tokens=10, n=2).json()
    too_much = client.post(f"/v1/holds/{hold['id']}/settle", json=usage(10, 1001), headers=auth(GATEWAY))
    assert too_much.status_code == 422, too_much.text
    error = too_much.json()["error"]
    assert (error["code"], error["param"]) == ("model_limit_exceeded", "usage.completion_tokens")
    assert "limit of 1000 output tokens (2 completions of 500)" in error["message"]
    checkpoint = client.post(f"/v1/holds/{hold['id']}/usage", json=usage(10, 1001), headers=auth(GATEWAY))
    assert checkpoint.status_code == 422
    settled = client.post(f"/v1/holds/{hold['id']}/settle", json=usage(10, 1000), headers=auth(GATEWAY))
    assert settled.status_code == 200, settled.text
    assert settled.json()["charge"]["amount"] == "0.01002"  # 10 x 2 / 1e6 + 1000 x 10 / 1e6


def test_a_retired_model_is_refused_with_410(client: TestClient[Any], world: dict[str, Any]) -> None:
    account = world["account"]
    before = balance(client, account)
    r = reserve(client, account, "c-retired", max_output_tokens=10)
    assert r.status_code == 410, r.text
    assert r.json() == {
        "error": {
            "type": "invalid_request",
            "code": "model_retired",
            "message": "model 'c-retired' was retired at 2020-01-01T00:00:00Z; it takes no new requests",
            "param": "model",
            "retires_at": "2020-01-01T00:00:00Z",
        }
    }
    assert "sunset" not in r.headers
    assert balance(client, account) == before
    for fields in ({"max_output_tokens": 10}, {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}):
        q = quote(client, world["currency"], "c-retired", **fields)
        assert q.status_code == 410, q.text
        assert q.json()["error"]["retires_at"] == "2020-01-01T00:00:00Z"
        admin = client.post(
            "/admin/v1/quotes",
            json={"model": "c-retired", "currency": world["currency"], **fields},
            headers=auth(FINANCE),
        )
        assert admin.status_code == 410, admin.text


def test_before_retirement_reserve_and_quote_carry_a_notice_and_sunset(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    key = new_id("k")
    r = reserve(client, world["account"], "c-retiring", key=key, max_output_tokens=10)
    assert r.status_code == 201, r.text
    assert r.json()["notice"] == RETIRING
    assert r.headers["sunset"] == SUNSET
    replay = reserve(client, world["account"], "c-retiring", key=key, max_output_tokens=10)
    assert replay.status_code == 200
    assert (replay.json()["notice"], replay.headers["sunset"]) == (RETIRING, SUNSET)
    hold_id = r.json()["id"]
    got = client.get(f"/v1/holds/{hold_id}", headers=auth(GATEWAY))
    assert (got.json()["notice"], got.headers["sunset"]) == (RETIRING, SUNSET)
    admin = client.get(f"/admin/v1/holds/{hold_id}", headers=auth(FINANCE))
    assert admin.json()["notice"] == RETIRING
    for fields in ({"max_output_tokens": 10}, {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}):
        q = quote(client, world["currency"], "c-retiring", **fields)
        assert q.status_code == 200, q.text
        assert (q.json()["notice"], q.headers["sunset"]) == (RETIRING, SUNSET)
    # the settle answers the outcome only: no notice there
    s = client.post(f"/v1/holds/{hold_id}/settle", json=usage(10, 10), headers=auth(GATEWAY))
    assert s.status_code == 200 and "notice" not in s.json() and "sunset" not in s.headers
    # a model without retires_at: no notice, no header
    plain = client.get(
        f"/v1/holds/{reserve(client, world['account'], 'c-plain', max_output_tokens=1).json()['id']}",
        headers=auth(GATEWAY),
    )
    assert "notice" not in plain.json() and "sunset" not in plain.headers


def test_a_hold_reserved_before_retirement_settles_releases_and_reconciles(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account = world["account"]
    settled = reserve(client, account, "c-retiring", max_output_tokens=10).json()
    released = reserve(client, account, "c-retiring", max_output_tokens=10).json()
    reconciled = reserve(client, account, "c-retiring", max_output_tokens=10, ttl_seconds=1).json()
    first = client.post(f"/v1/holds/{reconciled['id']}/usage", json=usage(5, 5), headers=auth(GATEWAY))
    assert first.status_code == 200, first.text
    # Finance moves the retirement up: a new version says c-retiring retired an hour ago.
    retired = publish(client, sheet(world["currency"], retires_at="2026-01-01T00:00:00Z"))
    r = reserve(client, account, "c-retiring", max_output_tokens=10)
    assert r.status_code == 410, r.text
    assert r.json()["error"]["retires_at"] == "2026-01-01T00:00:00Z"
    assert quote(client, world["currency"], "c-retiring", max_output_tokens=10).status_code == 410
    # the holds pinned the earlier version: they checkpoint, settle and release as ever
    for hold in (settled, released):
        assert hold["price_version"] == world["version"] != retired
    checkpoint = client.post(f"/v1/holds/{settled['id']}/usage", json=usage(100, 5), headers=auth(GATEWAY))
    assert checkpoint.status_code == 200, checkpoint.text
    s = client.post(f"/v1/holds/{settled['id']}/settle", json=usage(100, 10), headers=auth(GATEWAY))
    assert s.status_code == 200, s.text
    assert (s.json()["state"], s.json()["charge"]["amount"]) == ("settled", "0.0003")  # 100 x 2 + 10 x 10
    assert (s.json()["price_version"], s.json()["released"]) == (world["version"], "0.0018")  # 0.0021 held
    rel = client.post(f"/v1/holds/{released['id']}/release", headers=auth(GATEWAY))
    assert rel.status_code == 200 and rel.json()["state"] == "released"
    time.sleep(2.2)  # past the TTL (the checkpoint extended it by 1 s) and the test grace
    run = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))
    assert run.status_code in (200, 201), run.text
    after = client.get(f"/v1/holds/{reconciled['id']}", headers=auth(GATEWAY)).json()
    assert (after["state"], after["resolved_by"]) == ("settled", "reconciler")
    assert after["charge"]["amount"] == "0.00006"  # 5 x 2 / 1e6 + 5 x 10 / 1e6
    # its pinned version still announces the retirement it gave
    assert after["notice"] == RETIRING
    assert Decimal(balance(client, account)["held"]) == 0
    assert_integrity(client)


def test_the_openapi_document_declares_the_notice_the_header_and_410(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    import jsonschema_rs

    document = client.get("/schema/openapi.json").json()
    schemas = document["components"]["schemas"]
    for path, method in (("/v1/holds", "post"), ("/v1/quotes", "post"), ("/admin/v1/quotes", "post")):
        op = document["paths"][path][method]
        assert "410" in op["responses"], path
        assert "model_retired" in op["responses"]["410"]["description"]
        ok = op["responses"]["201" if path == "/v1/holds" else "200"]
        assert "Sunset" in ok.get("headers", {}), path
    assert "Sunset" in document["paths"]["/v1/holds/{hold_id}"]["get"]["responses"]["200"]["headers"]
    assert set(schemas["Notice"]["required"]) == {"code", "message", "retires_at"}
    for name in ("Hold", "ChargeQuote", "ReservationQuote"):
        assert "notice" in schemas[name]["properties"] and "notice" not in schemas[name].get("required", [])
    assert "retires_at" in schemas["ErrorDetail"]["properties"]
    model = schemas["ModelPrice"]["properties"]
    assert {"default_output_tokens", "max_n", "retires_at"} <= set(model)
    # real answers validate against it
    hold = reserve(client, world["account"], "c-retiring", max_output_tokens=10).json()
    check = jsonschema_rs.validator_for(
        {"$ref": "#/components/schemas/Hold", "components": document["components"]}
    )
    assert check.is_valid(hold), hold
    refused = reserve(client, world["account"], "c-retired", max_output_tokens=10).json()
    error = jsonschema_rs.validator_for(
        {"$ref": "#/components/schemas/ErrorBody", "components": document["components"]}
    )
    assert error.is_valid(refused), refused
    published = jsonschema_rs.validator_for(
        {"$ref": "#/components/schemas/PriceDocument", "components": document["components"]}
    )
    assert published.is_valid(sheet(world["currency"]))


def test_the_by_key_lookup_answers_as_the_single_hold_s_get(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    """The request log's by-key lookups carry the notice and the Sunset header as GET /holds/{id}."""
    from urllib.parse import quote as quote_path

    account = world["account"]

    def sent(r: Any) -> tuple[int, list[tuple[bytes, bytes]], Any]:
        headers = [(k, v) for k, v in r.headers.raw if k.lower() not in (b"x-request-id", b"date")]
        return r.status_code, headers, r.json()

    for model in ("c-retiring", "c-plain"):
        key = new_id("k")
        hold = reserve(client, account, model, key=key, max_output_tokens=10).json()
        for settled in (False, True):
            if settled:
                r = client.post(f"/v1/holds/{hold['id']}/settle", json=usage(10, 10), headers=auth(GATEWAY))
                assert r.status_code == 200, r.text
            single = client.get(f"/v1/holds/{hold['id']}", headers=auth(GATEWAY))
            admin_single = client.get(f"/admin/v1/holds/{hold['id']}", headers=auth(FINANCE))
            by_key = client.get(
                f"/v1/accounts/{quote_path(account, safe='')}/holds/by-key",
                params={"idempotency_key": key},
                headers=auth(GATEWAY),
            )
            admin_by_key = client.get(
                f"/admin/v1/accounts/{quote_path(account, safe='')}/holds/by-key",
                params={"idempotency_key": key},
                headers=auth(FINANCE),
            )
            assert sent(by_key) == sent(single), (model, settled)
            assert sent(admin_by_key) == sent(admin_single) == sent(single), (model, settled)
            if model == "c-retiring":
                assert (by_key.json()["notice"], by_key.headers["sunset"]) == (RETIRING, SUNSET)
            else:
                assert "notice" not in by_key.json() and "sunset" not in by_key.headers
