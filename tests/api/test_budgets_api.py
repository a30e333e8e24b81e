"""Budgets per (account, budget key): the admin surface, and reserve / settle / release /
true-up / reconciler accounting against them.

Prices as in test_holds_api: a simple sheet per test in its own currency (input 2, output
10 per 1M; max input 1000, max output 500), so reserving with max_output_tokens=100 holds
0.003, and settling 100 prompt + 10 completion tokens charges 0.0003.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient
from structlog.testing import capture_logs

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

HOLD = Decimal("0.003")
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}
CHARGE = Decimal("0.0003")


@pytest.fixture
def world(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    return {"currency": currency, "account": make_account("1", currency=currency)}


def reserve(
    client: TestClient[Any], account_id: str, budget_key: str | None = "proj-a", **fields: Any
) -> Any:
    body: dict[str, Any] = {
        "account_id": account_id,
        "idempotency_key": new_id("r"),
        "model": "t-simple",
        "max_output_tokens": 100,
        **fields,
    }
    if budget_key is not None:
        body["budget_key"] = budget_key
    return client.post("/v1/holds", json=body, headers=auth(GATEWAY))


def put_budget(
    client: TestClient[Any], account_id: str, key: str = "proj-a", token: str = FINANCE, **body: Any
) -> Any:
    body.setdefault("reason", "budget for test")
    return client.put(f"/admin/v1/accounts/{account_id}/budgets/{key}", json=body, headers=auth(token))


def budget(client: TestClient[Any], account_id: str, key: str = "proj-a") -> dict[str, Any]:
    r = client.get(f"/admin/v1/accounts/{account_id}/budgets/{key}", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def balance(client: TestClient[Any], account_id: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
    return body


def settle(client: TestClient[Any], hold_id: str, usage: dict[str, Any] = USAGE) -> Any:
    return client.post(f"/v1/holds/{hold_id}/settle", json={"usage": usage}, headers=auth(GATEWAY))


def numbers(body: dict[str, Any]) -> tuple[Decimal, Decimal]:
    return Decimal(body["spent"]), Decimal(body["held"])


def open_holds_total(client: TestClient[Any], account_id: str, key: str) -> Decimal:
    total = Decimal(0)
    for state in ("open", "interrupted"):
        r = client.get(
            "/admin/v1/holds",
            params={"account_id": account_id, "state": state, "limit": 500},
            headers=auth(VIEWER),
        )
        total += sum((Decimal(h["amount"]) for h in r.json()["data"] if h["budget_key"] == key), Decimal(0))
    return total


def utc_midnight(day: date) -> str:
    return f"{day.isoformat()}T00:00:00Z"


# --- the admin surface ---------------------------------------------------------------------


def test_put_budget_shows_the_current_period_and_is_audited(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    r = put_budget(client, account_id, amount="0.01", period="daily", alert_threshold="0.8")
    assert r.status_code == 200, r.text
    today = datetime.now(UTC).date()
    assert r.json() == {
        **r.json(),
        "account_id": account_id,
        "budget_key": "proj-a",
        "currency": world["currency"],
        "amount": "0.01",
        "period": "daily",
        "alert_threshold": "0.8",
        "period_start": utc_midnight(today),
        "period_end": utc_midnight(today + timedelta(days=1)),
        "spent": "0",
        "held": "0",
        "remaining": "0.01",
        "alert_crossed": False,
        "alerted_at": None,
    }
    assert budget(client, account_id) == r.json()

    for period, start, end in [
        (
            "weekly",
            today - timedelta(days=today.weekday()),
            today - timedelta(days=today.weekday()) + timedelta(7),
        ),
        ("monthly", today.replace(day=1), (today.replace(day=28) + timedelta(days=4)).replace(day=1)),
        ("none", None, None),
    ]:
        body = put_budget(client, account_id, amount="0.01", period=period).json()
        assert (body["period_start"], body["period_end"]) == (
            utc_midnight(start) if start else None,
            utc_midnight(end) if end else None,
        )

    entries = client.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER)).json()[
        "data"
    ]
    sets = [e for e in entries if e["action"] == "budget.set"]
    assert len(sets) == 4
    assert sets[-1]["reason"] == "budget for test"
    assert sets[-1]["details"] == {
        "budget_key": "proj-a",
        "before": {"amount": None, "period": None, "alert_threshold": None},
        "after": {"amount": "0.01", "period": "daily", "alert_threshold": "0.8"},
    }
    # The same terms again: nothing changes, nothing is recorded.
    put_budget(client, account_id, amount="0.010", period="none")
    entries = client.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER)).json()[
        "data"
    ]
    assert len([e for e in entries if e["action"] == "budget.set"]) == 4


def test_budget_refusals(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"amount": "0", "period": "daily"}, "amount"),
        ({"amount": "-1", "period": "daily"}, "amount"),
        ({"amount": "1e3", "period": "daily"}, "amount"),
        ({"amount": "0.0000000000001", "period": "daily"}, "amount"),
        ({"amount": "100000000000000000000000000", "period": "daily"}, "amount"),
        ({"amount": "1"}, "period"),
        ({"amount": "1", "period": "yearly"}, "period"),
        ({"amount": "1", "period": "daily", "alert_threshold": "0"}, "alert_threshold"),
        ({"amount": "1", "period": "daily", "alert_threshold": "1.01"}, "alert_threshold"),
        ({"amount": None, "period": "daily"}, "period"),
        ({"amount": "1", "period": "daily", "reason": "   "}, "reason"),
        ({"amount": "1", "period": "daily", "limit": "2"}, "limit"),
    ]
    for body, param in cases:
        r = put_budget(client, account_id, **body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.text)
    assert put_budget(client, account_id, key="k" * 129, amount="1", period="daily").json()["error"][
        "param"
    ] == ("budget_key")
    r = client.put(
        f"/admin/v1/accounts/{account_id}/budgets/k",
        json={"amount": "1", "period": "daily"},
        headers=auth(FINANCE),
    )
    assert (r.status_code, r.json()["error"]["param"]) == (422, "reason")
    # Roles: finance sets, viewer reads, the gateway has no access.
    assert put_budget(client, account_id, token=VIEWER, amount="1", period="daily").status_code == 403
    assert put_budget(client, account_id, token=GATEWAY, amount="1", period="daily").status_code == 403
    assert client.get(f"/admin/v1/accounts/{account_id}/budgets", headers=auth(GATEWAY)).status_code == 403
    # Not found: an unknown key (read or removal), an unknown account.
    r = client.get(f"/admin/v1/accounts/{account_id}/budgets/nope", headers=auth(VIEWER))
    assert (r.status_code, r.json()["error"]["code"]) == (404, "budget_not_found")
    r = put_budget(client, account_id, key="nope", amount=None)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "budget_not_found")
    for r in (
        put_budget(client, "no-such-account", amount="1", period="daily"),
        client.get("/admin/v1/accounts/no-such-account/budgets", headers=auth(VIEWER)),
        client.get("/admin/v1/accounts/no-such-account/budgets/k", headers=auth(VIEWER)),
    ):
        assert (r.status_code, r.json()["error"]["code"]) == (404, "account_not_found")
    # Nothing was written by any of them.
    assert client.get(f"/admin/v1/accounts/{account_id}/budgets", headers=auth(VIEWER)).json()["data"] == []
    # The reserve's budget_key: 1..128 characters, no "/" (the admin path could not name it).
    for key in ("", "k" * 129, "team/search"):
        r = reserve(client, account_id, budget_key=key)
        assert (r.status_code, r.json()["error"]["param"]) == (422, "budget_key")
    r = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": new_id("r"),
            "model": "t-simple",
            "budget_key": None,
        },
        headers=auth(GATEWAY),
    )
    assert (r.status_code, r.json()["error"]["param"]) == (422, "budget_key")
    assert balance(client, account_id)["held"] == "0"


# --- reserve ------------------------------------------------------------------------------------


def test_reserve_past_the_budget_is_402_with_the_numbers_and_holds_nothing(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="0.007", period="daily")
    first, second = reserve(client, account_id), reserve(client, account_id)
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["budget_key"] == "proj-a"
    r = reserve(client, account_id)
    assert r.status_code == 402, r.text
    today = datetime.now(UTC).date()
    error = r.json()["error"]
    assert error == {
        **error,
        "type": "budget_exceeded",
        "code": "budget_exceeded",
        "param": "budget_key",
        "budget_key": "proj-a",
        "budget": "0.007",
        "spent": "0",
        "held": "0.006",
        "required": "0.003",
        "currency": world["currency"],
        "period_start": utc_midnight(today),
        "period_end": utc_midnight(today + timedelta(days=1)),
    }
    assert "0.003" in error["message"] and "0.007" in error["message"]
    # Nothing held: the account and the budget are as after the two reserves.
    assert balance(client, account_id)["held"] == "0.006"
    assert numbers(budget(client, account_id)) == (0, Decimal("0.006"))
    assert open_holds_total(client, account_id, "proj-a") == Decimal("0.006")
    # Another key of the same account, and a reserve without a key, are not limited by it.
    assert reserve(client, account_id, budget_key="proj-b").status_code == 201
    assert reserve(client, account_id, budget_key=None).status_code == 201
    # Exactly up to the budget is allowed: release one hold, then 0.003 held + 0.004 = 0.007.
    assert client.post(f"/v1/holds/{first.json()['id']}/release", headers=auth(GATEWAY)).status_code == 200
    assert reserve(client, account_id, max_output_tokens=200).status_code == 201
    assert numbers(budget(client, account_id)) == (0, Decimal("0.007"))
    assert budget(client, account_id)["remaining"] == "0"
    assert_integrity(client)


def test_insufficient_funds_is_reported_before_the_budget(client: TestClient[Any], make_account: Any) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account_id = make_account("0.001", currency=currency)
    put_budget(client, account_id, amount="0.001", period="none")
    r = reserve(client, account_id)
    assert (r.status_code, r.json()["error"]["code"]) == (402, "insufficient_funds")


def test_a_key_without_a_budget_is_unlimited_but_tracked(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    holds = [reserve(client, account_id, budget_key="tag-only").json() for _ in range(3)]
    assert all(h["budget_key"] == "tag-only" for h in holds)
    assert settle(client, holds[0]["id"]).status_code == 200
    body = budget(client, account_id, "tag-only")
    assert (body["amount"], body["period"], body["remaining"], body["period_start"]) == (
        None,
        None,
        None,
        None,
    )
    assert numbers(body) == (CHARGE, 2 * HOLD)
    assert body["lifetime_spent"] == "0.0003"
    listed = client.get(f"/admin/v1/accounts/{account_id}/budgets", headers=auth(VIEWER)).json()
    assert [b["budget_key"] for b in listed["data"]] == ["tag-only"]
    # Finance budgets the key later: what it already spent and holds counts.
    body = put_budget(client, account_id, key="tag-only", amount="0.0063", period="monthly").json()
    assert (body["spent"], body["held"], body["remaining"]) == ("0.0003", "0.006", "0")
    r = reserve(client, account_id, budget_key="tag-only")
    assert (r.status_code, r.json()["error"]["code"]) == (402, "budget_exceeded")


def test_budget_key_is_part_of_the_reserve_and_its_idempotency(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    body = {
        "account_id": account_id,
        "idempotency_key": new_id("r"),
        "model": "t-simple",
        "max_output_tokens": 100,
    }
    plain = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert plain.status_code == 201 and plain.json()["budget_key"] is None
    assert client.post("/v1/holds", json=body, headers=auth(GATEWAY)).status_code == 200
    r = client.post("/v1/holds", json={**body, "budget_key": "proj-a"}, headers=auth(GATEWAY))
    assert (r.status_code, r.json()["error"]["code"]) == (409, "idempotency_conflict")
    keyed = {**body, "idempotency_key": new_id("r"), "budget_key": "proj-a"}
    first = client.post("/v1/holds", json=keyed, headers=auth(GATEWAY))
    again = client.post("/v1/holds", json=keyed, headers=auth(GATEWAY))
    assert (first.status_code, again.status_code, again.json()["id"]) == (201, 200, first.json()["id"])
    assert (
        client.get(f"/v1/holds/{first.json()['id']}", headers=auth(GATEWAY)).json()["budget_key"] == "proj-a"
    )
    # The replay did not hold twice.
    assert numbers(budget(client, account_id)) == (0, HOLD)


# --- settle, release, true-up, reconciler ------------------------------------------------------


def test_settle_counts_against_the_period_and_release_frees_the_hold(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="0.0064", period="weekly")
    a, b = reserve(client, account_id).json(), reserve(client, account_id).json()
    assert numbers(budget(client, account_id)) == (0, 2 * HOLD)
    assert settle(client, a["id"]).status_code == 200
    assert numbers(budget(client, account_id)) == (CHARGE, HOLD)
    assert settle(client, a["id"]).status_code == 200  # the same settle again counts once
    assert numbers(budget(client, account_id)) == (CHARGE, HOLD)
    # 0.0003 spent + 0.003 held + 0.003 = 0.0063 <= 0.0064
    c = reserve(client, account_id)
    assert c.status_code == 201
    assert reserve(client, account_id).status_code == 402
    assert client.post(f"/v1/holds/{b['id']}/release", headers=auth(GATEWAY)).status_code == 200
    assert client.post(f"/v1/holds/{b['id']}/release", headers=auth(GATEWAY)).status_code == 200
    body = budget(client, account_id)
    assert numbers(body) == (CHARGE, HOLD)
    assert body["remaining"] == "0.0031"
    # A settle above the hold counts what was charged.
    big = {"prompt_tokens": 1000, "completion_tokens": 500}  # 0.002 + 0.005 = 0.007 > 0.003 held
    assert settle(client, c.json()["id"], big).status_code == 200
    body = budget(client, account_id)
    assert numbers(body) == (Decimal("0.0073"), 0)
    assert body["remaining"] == "0"
    assert open_holds_total(client, account_id, "proj-a") == 0
    assert_integrity(client)


def test_batched_settles_with_and_without_a_key_move_only_the_keys_budget(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    """The batch settles holds with and without a budget key alike; only a keyed one moves a budget."""
    account_id = world["account"]
    put_budget(client, account_id, amount="1", period="daily")
    plain, keyed = reserve(client, account_id, budget_key=None).json(), reserve(client, account_id).json()
    assert numbers(budget(client, account_id)) == (0, HOLD)
    assert settle(client, plain["id"]).status_code == 200
    assert numbers(budget(client, account_id)) == (0, HOLD)
    assert settle(client, keyed["id"]).status_code == 200
    assert numbers(budget(client, account_id)) == (CHARGE, 0)
    a, b = reserve(client, account_id).json(), reserve(client, account_id, budget_key=None).json()
    assert settle(client, a["id"]).status_code == 200
    assert settle(client, b["id"]).status_code == 200
    assert numbers(budget(client, account_id)) == (2 * CHARGE, 0)
    assert_integrity(client)


def test_admin_settle_and_release_then_late_gateway_true_up(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="1", period="daily")
    a, b = reserve(client, account_id).json(), reserve(client, account_id).json()
    r = client.post(
        f"/admin/v1/holds/{a['id']}/settle", json={"reason": "ops", "usage": USAGE}, headers=auth(FINANCE)
    )
    assert r.status_code == 200, r.text
    r = client.post(f"/admin/v1/holds/{b['id']}/release", json={"reason": "ops"}, headers=auth(FINANCE))
    assert r.status_code == 200, r.text
    assert numbers(budget(client, account_id)) == (CHARGE, 0)
    # The gateway's authoritative usage arrives late: the difference counts.
    more = {"prompt_tokens": 200, "completion_tokens": 20}  # 0.0006
    assert settle(client, a["id"], more).json()["true_up"] == "0.0003"
    assert settle(client, b["id"], USAGE).json()["true_up"] == "0.0003"
    body = budget(client, account_id)
    assert numbers(body) == (Decimal("0.0009"), 0)
    assert body["lifetime_spent"] == "0.0009"
    # A refund true-up lowers the spend (a's true-up again is a replay; a new hold shows it).
    c = reserve(client, account_id).json()
    client.post(
        f"/admin/v1/holds/{c['id']}/settle", json={"reason": "ops", "usage": more}, headers=auth(FINANCE)
    )
    assert settle(client, c["id"], USAGE).json()["true_up"] == "-0.0003"
    assert numbers(budget(client, account_id)) == (Decimal("0.0012"), 0)
    assert_integrity(client)


def test_reconciler_resolutions_move_the_budget(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="1", period="monthly")
    released = reserve(client, account_id, ttl_seconds=1).json()
    settled = reserve(client, account_id, ttl_seconds=1).json()
    r = client.post(f"/v1/holds/{settled['id']}/usage", json={"usage": USAGE}, headers=auth(GATEWAY))
    assert r.status_code == 200
    time.sleep(2.2)  # the checkpoint extended its expiry by the TTL
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))
    assert r.status_code in (200, 201), r.text
    states = {
        h: client.get(f"/v1/holds/{h}", headers=auth(GATEWAY)).json() for h in (released["id"], settled["id"])
    }
    assert states[released["id"]]["state"] == "released"
    assert states[settled["id"]]["state"] == "settled"
    assert states[settled["id"]]["resolved_by"] == "reconciler"
    assert numbers(budget(client, account_id)) == (CHARGE, 0)


# --- periods and the alert --------------------------------------------------------------------


def test_a_new_period_starts_from_zero_spend(
    client: TestClient[Any], world: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="0.0035", period="daily")
    settle(client, reserve(client, account_id).json()["id"])
    held = reserve(client, account_id).json()
    assert reserve(client, account_id).status_code == 402  # 0.0003 + 0.003 + 0.003 > 0.0035
    # Pretend the spend was yesterday's: the stored daily window is then an old one.
    sql.execute(
        "UPDATE budgets SET day_start = day_start - 1 WHERE account_id = %s AND budget_key = 'proj-a'",
        (account_id,),
    )
    sql.commit()
    body = budget(client, account_id)
    assert numbers(body) == (0, HOLD)
    assert body["lifetime_spent"] == "0.0003"
    assert reserve(client, account_id).status_code == 402  # 0 + 0.003 + 0.003: what is held still counts
    # A settle today rolls the window forward and counts only today's charge.
    settle(client, held["id"])
    assert numbers(budget(client, account_id)) == (CHARGE, 0)
    row = sql.execute(
        "SELECT day_start, day_spent, spent FROM budgets WHERE account_id = %s AND budget_key = 'proj-a'",
        (account_id,),
    ).fetchone()
    assert row == (datetime.now(UTC).date(), CHARGE, 2 * CHARGE)
    assert reserve(client, account_id).status_code == 201  # 0.0003 + 0 + 0.003 <= 0.0035


def test_alert_threshold_is_reported_once_per_period(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="0.01", period="monthly", alert_threshold="0.05")  # at 0.0005
    holds = [reserve(client, account_id).json() for _ in range(3)]

    def alerts() -> float:
        text = client.get("/metrics").text
        m = re.search(r'^ledger_budget_alerts_total\{period="monthly"\} (\S+)$', text, re.M)
        return float(m.group(1)) if m else 0.0

    before = alerts()
    with capture_logs() as logs:
        settle(client, holds[0]["id"])  # 0.0003: below
        assert (budget(client, account_id)["alert_crossed"], alerts()) == (False, before)
        settle(client, holds[1]["id"])  # 0.0006: crossed
        body = budget(client, account_id)
        assert (body["alert_crossed"], alerts()) == (True, before + 1)
        assert body["alerted_at"] is not None
        settle(client, holds[2]["id"])  # 0.0009: already alerted in this period
        assert alerts() == before + 1
    warnings = [e for e in logs if e["event"] == "budget.alert_threshold_reached"]
    assert len(warnings) == 1
    assert (warnings[0]["log_level"], warnings[0]["budget_key"], warnings[0]["spent"]) == (
        "warning",
        "proj-a",
        "0.0006",
    )
    # New terms clear the record: the next settle at or over the threshold alerts again.
    put_budget(client, account_id, amount="0.01", period="monthly", alert_threshold="0.5")
    assert budget(client, account_id)["alerted_at"] is None
    hold = reserve(client, account_id).json()
    settle(client, hold["id"])
    assert alerts() == before + 1  # 0.0012 < 0.005
    put_budget(client, account_id, amount="0.01", period="monthly", alert_threshold="0.1")
    hold = reserve(client, account_id).json()
    settle(client, hold["id"])
    assert alerts() == before + 2


def test_remove_a_budget_with_amount_null(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="0.003", period="none", alert_threshold="0.5")
    assert reserve(client, account_id).status_code == 201
    assert reserve(client, account_id).status_code == 402
    r = put_budget(client, account_id, amount=None, reason="project unlimited now")
    assert r.status_code == 200, r.text
    assert (r.json()["amount"], r.json()["period"], r.json()["alert_threshold"], r.json()["held"]) == (
        None,
        None,
        None,
        "0.003",
    )
    assert reserve(client, account_id).status_code == 201
    entries = client.get(
        "/admin/v1/audit-log", params={"target": account_id, "action": "budget.remove"}, headers=auth(VIEWER)
    ).json()["data"]
    assert [(e["reason"], e["details"]["before"]["amount"]) for e in entries] == [
        ("project unlimited now", "0.003")
    ]


def test_admin_role_sets_and_viewer_lists(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    for key in ("b", "a", "c"):
        assert (
            put_budget(client, account_id, key=key, token=ADMIN, amount="1", period="daily").status_code
            == 200
        )
    page = client.get(
        f"/admin/v1/accounts/{account_id}/budgets", params={"limit": 2}, headers=auth(VIEWER)
    ).json()
    assert [b["budget_key"] for b in page["data"]] == ["a", "b"]
    rest = client.get(
        f"/admin/v1/accounts/{account_id}/budgets",
        params={"cursor": page["next_cursor"]},
        headers=auth(VIEWER),
    ).json()
    assert ([b["budget_key"] for b in rest["data"]], rest["next_cursor"]) == (["c"], None)


# --- the database keeps the numbers honest -------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        "held = -1",
        "spent = -0.000000000001",
        "day_spent = -1",
        "amount = 0",
        "amount = NULL",
        "alert_threshold = 1.5",
        "week_start = week_start + 1",
        "month_start = month_start + 1",
    ],
)
def test_the_database_refuses_dishonest_budget_numbers(
    client: TestClient[Any], world: dict[str, Any], sql: psycopg.Connection[Any], change: str
) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="1", period="daily", alert_threshold="0.5")
    with pytest.raises(psycopg.errors.CheckViolation):
        sql.execute(f"UPDATE budgets SET {change} WHERE account_id = %s", (account_id,))  # type: ignore[arg-type]
    sql.rollback()


def test_budgets_and_a_holds_budget_key_are_not_rewritten(
    client: TestClient[Any], world: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    account_id = world["account"]
    hold = reserve(client, account_id).json()
    with pytest.raises(psycopg.errors.RestrictViolation):
        sql.execute("DELETE FROM budgets WHERE account_id = %s", (account_id,))
    sql.rollback()
    with pytest.raises(psycopg.errors.RestrictViolation):
        sql.execute("UPDATE holds SET budget_key = 'other' WHERE id = %s", (hold["id"],))
    sql.rollback()


def test_a_frozen_account_holds_nothing_on_its_budget(client: TestClient[Any], world: dict[str, Any]) -> None:
    from tests.api.test_account_controls_api import freeze

    account_id = world["account"]
    put_budget(client, account_id, amount="1", period="monthly")
    assert reserve(client, account_id).status_code == 201
    assert freeze(client, account_id).status_code == 200
    r = reserve(client, account_id)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "account_frozen")
    assert numbers(budget(client, account_id)) == (0, HOLD)  # only the hold before the freeze


@pytest.mark.parametrize(
    ("period", "shift"),
    [
        ("weekly", "week_start = week_start - 7"),
        ("monthly", "month_start = month_start - interval '1 month'"),
    ],
)
def test_a_batched_settle_rolls_a_weekly_or_monthly_window(
    client: TestClient[Any], world: dict[str, Any], sql: psycopg.Connection[Any], period: str, shift: str
) -> None:
    """The batch moves a budget with the same window rules as the locked path (one SQL
    function): a stored window that is not the current one counts as 0 and rolls forward."""
    account_id = world["account"]
    put_budget(client, account_id, amount="0.0035", period=period)
    settle(client, reserve(client, account_id).json()["id"])
    held = reserve(client, account_id).json()
    assert reserve(client, account_id).status_code == 402
    sql.execute(f"UPDATE budgets SET {shift} WHERE account_id = %s AND budget_key = 'proj-a'", (account_id,))
    sql.commit()
    assert numbers(budget(client, account_id)) == (0, HOLD)
    assert settle(client, held["id"]).status_code == 200
    assert numbers(budget(client, account_id)) == (CHARGE, 0)
    body = budget(client, account_id)
    assert body["lifetime_spent"] == str(2 * CHARGE)


def test_period_none_counts_the_lifetime_spend(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    put_budget(client, account_id, amount="0.0035", period="none")
    settle(client, reserve(client, account_id).json()["id"])
    assert numbers(budget(client, account_id)) == (CHARGE, 0)
    held = reserve(client, account_id).json()
    assert reserve(client, account_id).status_code == 402  # 0.0003 + 0.003 + 0.003 > 0.0035
    assert settle(client, held["id"]).status_code == 200
    assert numbers(budget(client, account_id)) == (2 * CHARGE, 0)
