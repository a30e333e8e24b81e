"""A grant ends at its expires_at: from that instant it backs no reserve and no settle and
counts in no `available`, whether or not the expiry job has run (migration 0020).

Prices as in test_grants_api: input 2 and output 10 per 1M tokens, so a reservation with
max_output_tokens O holds 0.002 + O x 0.00001 (max input 1,000 tokens).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.api.test_grants_api import balance, expire_now, grant, grants_of, later
from tests.conftest import (
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
from tests.integration.test_grant_invariants import sql_grant


@pytest.fixture
def empty(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    """An account with no paid money, in a currency of its own."""
    currency = fresh_currency()
    publish(client, simple_document(currency))
    return {"currency": currency, "account": make_account(None, currency=currency)}


def reserve(client: TestClient[Any], account_id: str, out: int = 100, **fields: Any) -> Any:
    body = {"account_id": account_id, "idempotency_key": new_id("r"), "model": "t-simple"}
    return client.post("/v1/holds", json={**body, "max_output_tokens": out, **fields}, headers=auth(GATEWAY))


def holds_of(sql: psycopg.Connection[Any], account_id: str) -> int:
    return int(sql.execute("SELECT count(*) FROM holds WHERE account_id = %s", (account_id,)).fetchone()[0])


def test_a_grant_past_expires_at_backs_no_reserve_before_the_expiry_job_runs(
    client: TestClient[Any], empty: dict[str, Any], sql: psycopg.Connection[Any], sa_url: str
) -> None:
    """The finding: a grant of 10 expiring in 4 s, a reserve after 5 s was 201 and the settle
    took `paid` to -5.52. Here: 1 s, with no expiry job in between."""
    account_id = empty["account"]
    assert grant(client, account_id, "10", expires_at=later(1)).status_code == 201
    assert balance(client, account_id)["available"] == "10"
    time.sleep(1.2)
    # Still posted (the job has not run), but worth nothing from expires_at on.
    assert balance(client, account_id) == {
        "balance": "10",
        "paid": "0",
        "granted": "0",
        "held": "0",
        "available": "0",
    }
    r = reserve(client, account_id)
    assert r.status_code == 402, r.text
    error = r.json()["error"]
    assert (error["code"], error["required"], error["available"]) == ("insufficient_funds", "0.003", "0")
    assert holds_of(sql, account_id) == 0
    # The job only posts the remainder out of the grant's book: available does not move.
    assert expire_now(sa_url)["expired"] >= 1
    assert balance(client, account_id) == {
        "balance": "0",
        "paid": "0",
        "granted": "0",
        "held": "0",
        "available": "0",
    }
    assert_integrity(client)


def test_paid_money_still_reserves_beside_a_lapsed_grant_and_no_more(
    client: TestClient[Any], empty: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    account_id = empty["account"]
    lapsed = sql_grant(
        sql, account_id, "5", expires="now() - interval '1 second'", currency=empty["currency"]
    )
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": new_id("d"), "amount": "0.004"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    assert balance(client, account_id)["available"] == "0.004"
    assert reserve(client, account_id, out=100).status_code == 201  # 0.003 of the 0.004 paid
    r = reserve(client, account_id, out=100)
    assert r.status_code == 402, r.text
    assert r.json()["error"]["available"] == "0.001"
    # The hold settles from paid, never from the lapsed grant.
    held = client.get(f"/admin/v1/holds?account_id={account_id}", headers=auth(VIEWER)).json()["data"]
    r = client.post(
        f"/v1/holds/{held[0]['id']}/settle",
        json={"usage": {"prompt_tokens": 1000, "completion_tokens": 100}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    assert grants_of(client, account_id)[lapsed]["remaining"] == "5"
    assert balance(client, account_id) == {
        "balance": "5.001",
        "paid": "0.001",
        "granted": "0",
        "held": "0",
        "available": "0.001",
    }
    assert_integrity(client)


def test_a_budgeted_reserve_does_not_spend_a_lapsed_grant_either(
    client: TestClient[Any], empty: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    """The reserve with a budget_key takes its own statement: the same rule holds there."""
    account_id = empty["account"]
    sql_grant(sql, account_id, "5", expires="now() - interval '1 second'", currency=empty["currency"])
    r = client.put(
        f"/admin/v1/accounts/{account_id}/budgets/proj",
        json={"amount": "10", "period": "daily", "reason": "cap"},
        headers=auth(FINANCE),
    )
    assert r.status_code in (200, 201), r.text
    r = reserve(client, account_id, budget_key="proj")
    assert r.status_code == 402, r.text
    error = r.json()["error"]
    assert (error["code"], error["available"]) == ("insufficient_funds", "0")
    assert holds_of(sql, account_id) == 0


def test_balance_as_of_counts_a_grant_until_its_expires_at_only(
    client: TestClient[Any], empty: dict[str, Any]
) -> None:
    account_id = empty["account"]
    assert grant(client, account_id, "2", expires_at=later(1)).status_code == 201
    before = (datetime.now(UTC) + timedelta(milliseconds=300)).isoformat().replace("+00:00", "Z")
    time.sleep(1.2)
    after = datetime.now(UTC).isoformat().replace("+00:00", "Z")

    def as_of(at: str) -> dict[str, str]:
        r = client.get(f"/admin/v1/accounts/{account_id}/balance", params={"as_of": at}, headers=auth(VIEWER))
        assert r.status_code == 200, r.text
        body: dict[str, str] = r.json()
        return {k: body[k] for k in ("balance", "paid", "granted", "available")}

    assert as_of(before) == {"balance": "2", "paid": "0", "granted": "2", "available": "2"}
    assert as_of(after) == {"balance": "2", "paid": "0", "granted": "0", "available": "0"}


def test_a_grant_that_lapses_while_a_hold_is_open_pays_none_of_its_settle(
    client: TestClient[Any], empty: dict[str, Any]
) -> None:
    """Reserved while the grant was live; settled after its expires_at: the charge falls to
    paid (the account goes below zero, as any charge beyond the funds does)."""
    account_id = empty["account"]
    soon = grant(client, account_id, "0.004", expires_at=later(1)).json()["grant_id"]
    hold = reserve(client, account_id)
    assert hold.status_code == 201, hold.text
    time.sleep(1.2)
    assert Decimal(balance(client, account_id)["available"]) == Decimal("-0.003")
    r = client.post(
        f"/v1/holds/{hold.json()['id']}/settle",
        json={"usage": {"prompt_tokens": 500, "completion_tokens": 0}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    assert grants_of(client, account_id)[soon]["remaining"] == "0.004"
    assert balance(client, account_id)["paid"] == "-0.001"
    assert_integrity(client)


def test_a_low_balance_alert_reads_available_without_a_lapsed_grant(
    client: TestClient[Any], empty: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    """Set on an account whose only money is an expired grant: it starts below its threshold."""
    from tests.api.test_alerts_api import put

    account_id = empty["account"]
    sql_grant(sql, account_id, "50", expires="now() - interval '1 second'", currency=empty["currency"])
    r = put(client, account_id, webhook_url="http://127.0.0.2:9/hook")  # an allow-listed receiver
    assert r.status_code == 200, r.text
    assert (r.json()["available"], r.json()["state"]) == ("0", "below")


def test_the_first_posting_after_a_grant_lapses_records_the_alert_crossing(
    client: TestClient[Any], empty: dict[str, Any], sa_url: str
) -> None:
    """Set while a grant of 50 is live (above 5); the grant lapses; a deposit of 1 leaves
    available at 1: the crossing is recorded then (0022), with the amounts the API reports;
    the expiry job's posting afterwards records nothing more."""
    from tests.api.test_alerts_api import put

    account_id = empty["account"]
    assert grant(client, account_id, "50", expires_at=later(1)).status_code == 201
    r = put(client, account_id, webhook_url="http://127.0.0.2:9/hook")
    assert (r.status_code, r.json()["state"]) == (200, "above"), r.text
    time.sleep(1.2)
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": new_id("d"), "amount": "1"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    alert = client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER)).json()
    assert (alert["state"], alert["available"]) == ("below", "1")
    events = client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(FINANCE)).json()["data"]
    assert [(e["type"], e["available_before"], e["available_after"]) for e in events] == [
        ("balance.below_threshold", "0", "1")
    ]
    expire_now(sa_url)
    events = client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(FINANCE)).json()["data"]
    assert len(events) == 1


def test_the_expiry_posting_records_a_crossing_with_the_lapsed_amount_already_gone(
    client: TestClient[Any], empty: dict[str, Any], sa_url: str
) -> None:
    """No posting between the lapse and the expiry job: the job's own posting records the
    crossing, and available_before does not count the grant it posts out."""
    from tests.api.test_alerts_api import put

    account_id = empty["account"]
    assert grant(client, account_id, "50", expires_at=later(1)).status_code == 201
    assert put(client, account_id, webhook_url="http://127.0.0.2:9/hook").json()["state"] == "above"
    time.sleep(1.2)
    expire_now(sa_url)
    events = client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(FINANCE)).json()["data"]
    assert [(e["type"], e["available_before"], e["available_after"]) for e in events] == [
        ("balance.below_threshold", "0", "0")
    ]
