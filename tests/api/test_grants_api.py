"""Credit grants: granting, consumption order at settle and true-up, expiry, balances, refusals.

Prices as in test_holds_api: a fresh currency per test, input 2 and output 10 per 1M
tokens, so usage (p, c) charges p x 0.000002 + c x 0.00001, and a reservation with
max_output_tokens O holds 0.002 + O x 0.00001.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from litestar.testing import TestClient

from ledger.context import CLI
from ledger.db import make_engine
from ledger.grants.service import GrantService
from tests.conftest import (
    ADMIN,
    FINANCE,
    GATEWAY,
    VIEWER,
    assert_integrity,
    auth,
    fresh_currency,
    new_id,
    publish,
    simple_document,
)


@pytest.fixture
def world(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    return {"currency": currency, "account": make_account("1", currency=currency)}


def later(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def grant(client: TestClient[Any], account_id: str, amount: str, **fields: Any) -> Any:
    body = {
        "idempotency_key": new_id("g"),
        "amount": amount,
        "expires_at": later(3600),
        "reason": "promotion",
        **fields,
    }
    return client.post(f"/admin/v1/accounts/{account_id}/grants", json=body, headers=auth(FINANCE))


def grants_of(client: TestClient[Any], account_id: str) -> dict[str, dict[str, Any]]:
    r = client.get(f"/admin/v1/accounts/{account_id}/grants", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    return {g["grant_id"]: g for g in r.json()["data"]}


def balance(client: TestClient[Any], account_id: str) -> dict[str, str]:
    r = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    body: dict[str, str] = r.json()
    return {k: body[k] for k in ("balance", "paid", "granted", "held", "available")}


def reserve_settle(
    client: TestClient[Any], account_id: str, p: int, c: int, *, out: int = 100
) -> dict[str, Any]:
    r = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": new_id("r"),
            "model": "t-simple",
            "max_output_tokens": out,
        },
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201, r.text
    hold_id = r.json()["id"]
    r = client.post(
        f"/v1/holds/{hold_id}/settle",
        json={"usage": {"prompt_tokens": p, "completion_tokens": c}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def journal(client: TestClient[Any], account_id: str) -> list[dict[str, Any]]:
    r = client.get(
        f"/admin/v1/accounts/{account_id}/transactions", params={"limit": 500}, headers=auth(VIEWER)
    )
    assert r.status_code == 200, r.text
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def legs(txn: dict[str, Any]) -> dict[tuple[str, str], Decimal]:
    """(account, book) -> amount; revenue shards become `revenue`."""
    out: dict[tuple[str, str], Decimal] = {}
    for e in txn["entries"]:
        account = "revenue" if e["account_id"].startswith("system:revenue:") else e["account_id"]
        out[(account, e["book"])] = out.get((account, e["book"]), Decimal(0)) + Decimal(e["amount"])
    return out


def expire_now(sa_url: str) -> dict[str, Any]:
    """One expiry pass, as `ledger expire-grants` runs it."""

    async def run() -> dict[str, Any]:
        engine = make_engine(sa_url, pool_size=2, max_overflow=0)
        try:
            return await GrantService(engine).expire_once(CLI)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def test_grant_consumed_then_expired_with_its_journal_entries(
    client: TestClient[Any], world: dict[str, Any], sa_url: str
) -> None:
    account_id, cur = world["account"], world["currency"]
    r = grant(client, account_id, "0.002", priority=0, expires_at=later(2.5), reference="promo-42")
    assert r.status_code == 201, r.text
    g = r.json()
    gid = g["grant_id"]
    assert (g["amount"], g["remaining"], g["consumed"], g["expired"], g["state"]) == (
        "0.002",
        "0.002",
        "0",
        "0",
        "active",
    )
    assert balance(client, account_id) == {
        "balance": "1.002",
        "paid": "1",
        "granted": "0.002",
        "held": "0",
        "available": "1.002",
    }
    granted_txn = journal(client, account_id)[0]
    assert granted_txn["kind"] == "grant"
    assert legs(granted_txn) == {
        (f"system:grants:{cur}", "main"): Decimal("-0.002"),
        (account_id, f"grant:{gid}"): Decimal("0.002"),
    }

    # A charge of 0.0015 (250 in, 100 out) on a hold of 0.003: all of it from the grant.
    hold = reserve_settle(client, account_id, 250, 100)
    assert hold["charge"]["amount"] == "0.0015"
    settle = journal(client, account_id)[0]
    assert settle["kind"] == "settle"
    assert legs(settle) == {
        (account_id, "hold"): Decimal("-0.003"),
        (account_id, "main"): Decimal("0.003"),
        (account_id, f"grant:{gid}"): Decimal("-0.0015"),
        ("revenue", "main"): Decimal("0.0015"),
    }
    assert balance(client, account_id)["paid"] == "1"
    assert balance(client, account_id)["granted"] == "0.0005"
    assert grants_of(client, account_id)[gid]["consumed"] == "0.0015"

    time.sleep(2.6)
    assert grants_of(client, account_id)[gid]["state"] == "expired"  # the remainder waits for the job
    summary = expire_now(sa_url)
    assert summary["expired"] >= 1
    expiry = journal(client, account_id)[0]
    assert expiry["kind"] == "grant_expiry"
    assert expiry["reference"] == gid
    assert legs(expiry) == {
        (account_id, f"grant:{gid}"): Decimal("-0.0005"),
        (f"system:grants:{cur}", "main"): Decimal("0.0005"),
    }
    after = grants_of(client, account_id)[gid]
    assert (after["remaining"], after["consumed"], after["expired"], after["state"]) == (
        "0",
        "0.0015",
        "0.0005",
        "expired",
    )
    assert after["expired_at"] is not None
    assert balance(client, account_id) == {
        "balance": "1",
        "paid": "1",
        "granted": "0",
        "held": "0",
        "available": "1",
    }
    # A second pass expires nothing of it again.
    expire_now(sa_url)
    assert [t["kind"] for t in journal(client, account_id)].count("grant_expiry") == 1
    audit = client.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(ADMIN)).json()[
        "data"
    ]
    actions = [a["action"] for a in audit]
    assert actions.count("grant.create") == 1 and actions.count("grant.expire") == 1
    report = assert_integrity(client)
    assert report["grant_mismatches"] == []


def test_consumption_order_is_priority_then_earliest_expiry(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    paid_late = grant(client, account_id, "0.001", priority=100, expires_at=later(600)).json()["grant_id"]
    promo_late = grant(client, account_id, "0.001", priority=0, expires_at=later(7200)).json()["grant_id"]
    promo_soon = grant(client, account_id, "0.001", priority=0, expires_at=later(3600)).json()["grant_id"]
    # 0.0025 = 750 in (0.0015) + 100 out (0.001): promo_soon, then promo_late, then half of paid_late.
    reserve_settle(client, account_id, 750, 100)
    remaining = {gid: g["remaining"] for gid, g in grants_of(client, account_id).items()}
    assert remaining == {promo_soon: "0", promo_late: "0", paid_late: "0.0005"}
    states = {gid: g["state"] for gid, g in grants_of(client, account_id).items()}
    assert states[promo_soon] == "consumed" and states[paid_late] == "active"
    assert balance(client, account_id)["paid"] == "1"
    r = client.get(f"/admin/v1/accounts/{account_id}/grants", params={"live": "true"}, headers=auth(VIEWER))
    assert [g["grant_id"] for g in r.json()["data"]] == [paid_late]
    assert_integrity(client)


def test_a_settle_larger_than_all_grants_falls_to_paid(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    a = grant(client, account_id, "0.0005", priority=0).json()["grant_id"]
    b = grant(client, account_id, "0.0005", priority=5).json()["grant_id"]
    # 0.003 = 1000 in + 100 out; grants pay 0.001, paid pays 0.002.
    reserve_settle(client, account_id, 1000, 100)
    settle = journal(client, account_id)[0]
    assert legs(settle) == {
        (account_id, "hold"): Decimal("-0.003"),
        (account_id, "main"): Decimal("0.001"),  # H - (X - G) = 0.003 - 0.002
        (account_id, f"grant:{a}"): Decimal("-0.0005"),
        (account_id, f"grant:{b}"): Decimal("-0.0005"),
        ("revenue", "main"): Decimal("0.003"),
    }
    assert balance(client, account_id) == {
        "balance": "0.998",
        "paid": "0.998",
        "granted": "0",
        "held": "0",
        "available": "0.998",
    }
    assert_integrity(client)


def test_an_account_without_grants_settles_as_before(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    reserve_settle(client, account_id, 1000, 100)
    assert legs(journal(client, account_id)[0]) == {
        (account_id, "hold"): Decimal("-0.003"),
        ("revenue", "main"): Decimal("0.003"),
    }
    assert balance(client, account_id)["paid"] == "0.997"


def test_grants_pay_for_reservations_and_an_expired_grant_is_never_consumed(
    client: TestClient[Any], make_account: Any, sa_url: str
) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account_id = make_account(None, currency=currency)
    # No paid money at all: the grant alone makes the reservation possible.
    soon = grant(client, account_id, "0.004", priority=0, expires_at=later(2)).json()["grant_id"]
    assert balance(client, account_id)["available"] == "0.004"
    hold = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": new_id("r"),
            "model": "t-simple",
            "max_output_tokens": 100,
        },
        headers=auth(GATEWAY),
    )
    assert hold.status_code == 201, hold.text
    time.sleep(2.1)
    r = client.post(
        f"/v1/holds/{hold.json()['id']}/settle",
        json={"usage": {"prompt_tokens": 1000, "completion_tokens": 0}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    assert grants_of(client, account_id)[soon]["remaining"] == "0.004"  # expired: not touched
    assert balance(client, account_id)["paid"] == "-0.002"
    expire_now(sa_url)
    assert balance(client, account_id) == {
        "balance": "-0.002",
        "paid": "-0.002",
        "granted": "0",
        "held": "0",
        "available": "-0.002",
    }
    assert_integrity(client)


def test_true_up_consumes_grants_and_a_refund_goes_to_paid(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    r = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": new_id("r"),
            "model": "t-simple",
            "max_output_tokens": 100,
        },
        headers=auth(GATEWAY),
    )
    hold_id = r.json()["id"]
    # An admin settles first (the transactional path), before any grant exists: paid pays 0.002.
    r = client.post(
        f"/admin/v1/holds/{hold_id}/settle",
        json={"usage": {"prompt_tokens": 1000, "completion_tokens": 0}, "reason": "stuck"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200, r.text
    gid = grant(client, account_id, "0.01", priority=0).json()["grant_id"]
    # The gateway's authoritative usage is larger: the 0.001 difference comes from the grant.
    r = client.post(
        f"/v1/holds/{hold_id}/settle",
        json={"usage": {"prompt_tokens": 1000, "completion_tokens": 100}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    true_up = journal(client, account_id)[0]
    assert true_up["kind"] == "true_up"
    assert legs(true_up) == {
        (account_id, f"grant:{gid}"): Decimal("-0.001"),
        ("revenue", "main"): Decimal("0.001"),
    }
    assert grants_of(client, account_id)[gid]["remaining"] == "0.009"
    assert balance(client, account_id)["paid"] == "0.998"

    # A refund (the authoritative usage is smaller than the reconciler's) goes back to paid.
    other = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": new_id("r"),
            "model": "t-simple",
            "max_output_tokens": 100,
        },
        headers=auth(GATEWAY),
    ).json()["id"]
    client.post(
        f"/admin/v1/holds/{other}/settle",
        json={"usage": {"prompt_tokens": 1000, "completion_tokens": 100}, "reason": "stuck"},
        headers=auth(FINANCE),
    )
    assert grants_of(client, account_id)[gid]["remaining"] == "0.006"  # the admin settle took 0.003
    r = client.post(
        f"/v1/holds/{other}/settle",
        json={"usage": {"prompt_tokens": 0, "completion_tokens": 100}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    assert legs(journal(client, account_id)[0]) == {
        (account_id, "main"): Decimal("0.002"),
        ("revenue", "main"): Decimal("-0.002"),
    }
    assert grants_of(client, account_id)[gid]["remaining"] == "0.006"
    assert balance(client, account_id)["paid"] == "1"
    assert_integrity(client)


def test_grant_is_idempotent_and_refusals_change_nothing(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    body = {"idempotency_key": new_id("g"), "amount": "5", "expires_at": later(3600), "reason": "welcome"}
    path = f"/admin/v1/accounts/{account_id}/grants"
    first = client.post(path, json=body, headers=auth(FINANCE))
    assert first.status_code == 201, first.text
    again = client.post(path, json=body, headers=auth(FINANCE))
    assert again.status_code == 200 and again.json()["grant_id"] == first.json()["grant_id"]
    assert first.json()["priority"] == 100 and first.json()["created_by"].startswith("finance:")
    conflict = client.post(path, json={**body, "amount": "6"}, headers=auth(FINANCE))
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"
    before = balance(client, account_id)
    refusals = [
        ({**body, "idempotency_key": new_id("g"), "amount": "0"}, 422, "amount"),
        ({**body, "idempotency_key": new_id("g"), "amount": "-1"}, 422, "amount"),
        ({**body, "idempotency_key": new_id("g"), "expires_at": later(-5)}, 422, "expires_at"),
        ({**body, "idempotency_key": new_id("g"), "expires_at": "2030-01-01T00:00:00"}, 422, "expires_at"),
        ({**body, "idempotency_key": new_id("g"), "priority": 1001}, 422, "priority"),
        ({**body, "idempotency_key": new_id("g"), "reason": "  "}, 422, "reason"),
    ]
    for refused, status, param in refusals:
        r = client.post(path, json=refused, headers=auth(FINANCE))
        assert r.status_code == status, (refused, r.text)
        assert r.json()["error"]["param"] == param, r.text
    assert client.post(path, json=body, headers=auth(VIEWER)).status_code == 403
    missing = client.post("/admin/v1/accounts/nobody-here/grants", json=body, headers=auth(FINANCE))
    assert missing.status_code == 404
    assert client.get("/admin/v1/accounts/nobody-here/grants", headers=auth(VIEWER)).status_code == 404
    assert balance(client, account_id) == before
    assert len(grants_of(client, account_id)) == 1
    admin_view = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER)).json()
    assert (admin_view["paid"], admin_view["granted"], admin_view["balance"]) == ("1", "5", "6")


@pytest.mark.parametrize("path", ["gateway", "admin"])
def test_a_budgeted_hold_settled_from_a_grant_moves_both(
    client: TestClient[Any], world: dict[str, Any], path: str
) -> None:
    """The settle statement carries the grant and the budget pieces together (fast path), and the
    locked path (admin settle) does both in its transaction: neither may drop the other."""
    account_id = world["account"]
    assert grant(client, account_id, "0.5", priority=0).status_code == 201
    r = client.put(
        f"/admin/v1/accounts/{account_id}/budgets/proj",
        json={"amount": "1", "period": "daily", "reason": "cap"},
        headers=auth(FINANCE),
    )
    assert r.status_code in (200, 201), r.text
    r = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": new_id("r"),
            "model": "t-simple",
            "max_output_tokens": 100,
            "budget_key": "proj",
        },
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201, r.text
    hold_id = r.json()["id"]
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}  # 1000 x 2 + 100 x 10 per 1M
    if path == "gateway":
        r = client.post(f"/v1/holds/{hold_id}/settle", json={"usage": usage}, headers=auth(GATEWAY))
    else:
        r = client.post(
            f"/admin/v1/holds/{hold_id}/settle",
            json={"usage": usage, "reason": "ops"},
            headers=auth(FINANCE),
        )
    assert r.status_code == 200, r.text
    assert r.json()["charge"]["amount"] == "0.003"
    budget = client.get(f"/admin/v1/accounts/{account_id}/budgets/proj", headers=auth(VIEWER)).json()
    assert (budget["spent"], budget["held"]) == ("0.003", "0")
    assert balance(client, account_id) == {
        "balance": "1.497",
        "paid": "1",
        "granted": "0.497",
        "held": "0",
        "available": "1.497",
    }
    assert_integrity(client)
