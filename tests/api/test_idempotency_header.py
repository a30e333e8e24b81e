"""The `Idempotency-Key` header on reserve, deposit and adjustment: the same key as the body field.

Header alone, body alone, both equal: one key, one hold / movement, replays answer 200
with the same result. Both different, neither, or a header that breaks the key's
constraints: 422 `validation_error` naming `idempotency_key`, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, VIEWER, auth, fresh_currency, new_id, publish, simple_document


@pytest.fixture
def world(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    return {"currency": currency, "account": make_account("1", currency=currency)}


def headers(token: str, key: str | None) -> dict[str, str]:
    return {**auth(token), **({"Idempotency-Key": key} if key is not None else {})}


def balance(client: TestClient[Any], account_id: str) -> dict[str, Any]:
    r = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return {k: body[k] for k in ("balance", "held", "available")}


def reserve(client: TestClient[Any], account: str, key: str | None, header: str | None) -> Any:
    body: dict[str, Any] = {"account_id": account, "model": "t-simple", "max_output_tokens": 100}
    if key is not None:
        body["idempotency_key"] = key
    return client.post("/v1/holds", json=body, headers=headers(GATEWAY, header))


def deposit(client: TestClient[Any], account: str, key: str | None, header: str | None) -> Any:
    body: dict[str, Any] = {"amount": "2.5"}
    if key is not None:
        body["idempotency_key"] = key
    return client.post(f"/admin/v1/accounts/{account}/deposits", json=body, headers=headers(FINANCE, header))


def adjust(client: TestClient[Any], account: str, key: str | None, header: str | None) -> Any:
    body: dict[str, Any] = {"amount": "-0.25", "reason": "goodwill reversal"}
    if key is not None:
        body["idempotency_key"] = key
    return client.post(
        f"/admin/v1/accounts/{account}/adjustments", json=body, headers=headers(FINANCE, header)
    )


CALLS: dict[str, Callable[[TestClient[Any], str, str | None, str | None], Any]] = {
    "reserve": reserve,
    "deposit": deposit,
    "adjustment": adjust,
}


def result_id(body: dict[str, Any]) -> str:
    return str(body.get("id") or body["transaction_id"])


@pytest.mark.parametrize("call", CALLS)
def test_header_alone_body_alone_and_both_equal_are_one_key(
    client: TestClient[Any], world: dict[str, Any], call: str
) -> None:
    send = CALLS[call]
    account = world["account"]
    key = new_id("k")
    first = send(client, account, None, key)  # header alone
    assert first.status_code == 201, first.text
    assert first.json()["idempotency_key"] == key
    after_first = balance(client, account)
    # The same key through the body, then through both: a replay of the same request.
    for body_key, header in ((key, None), (key, key)):
        again = send(client, account, body_key, header)
        assert again.status_code == 200, again.text
        assert result_id(again.json()) == result_id(first.json())
    assert balance(client, account) == after_first
    # A body-only key is a key too (and a new one makes a new result).
    other = send(client, account, new_id("k"), None)
    assert other.status_code == 201, other.text
    assert result_id(other.json()) != result_id(first.json())


@pytest.mark.parametrize("call", CALLS)
def test_header_and_body_different_is_422_and_changes_nothing(
    client: TestClient[Any], world: dict[str, Any], call: str
) -> None:
    send = CALLS[call]
    account = world["account"]
    before = balance(client, account)
    for body_key, header in ((new_id("a"), new_id("b")), (None, None), (None, ""), (None, "x" * 256)):
        r = send(client, account, body_key, header)
        assert r.status_code == 422, (body_key, header, r.text)
        error = r.json()["error"]
        assert error["code"] == "validation_error"
        assert error["param"] == "idempotency_key"
    assert balance(client, account) == before


def test_a_key_used_in_the_body_conflicts_through_the_header(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account = world["account"]
    key = new_id("k")
    assert deposit(client, account, key, None).status_code == 201
    r = client.post(
        f"/admin/v1/accounts/{account}/deposits",
        json={"amount": "3"},
        headers=headers(FINANCE, key),
    )
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "idempotency_conflict"
