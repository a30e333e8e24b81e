"""Reconciliation on real PostgreSQL: what a pass resolves, how, and what it records."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, VIEWER, assert_integrity, auth
from tests.workers.conftest import (
    RESERVED,
    SMALL,
    SMALL_CHARGE,
    api_run,
    balance,
    checkpoint,
    get_hold,
    interrupt,
    item_of,
    reserve,
    run_pass,
    settle_txns,
    wait_until_expired,
)


def test_expired_hold_with_a_checkpoint_is_settled_at_the_checkpoint(
    client: TestClient[Any], account: str, database: str
) -> None:
    hold = reserve(client, account, ttl=1)
    hold = checkpoint(client, hold["id"])
    wait_until_expired(hold)

    summary = api_run(client)

    assert summary["status"] == "succeeded"
    assert summary["trigger"] == "api"
    assert summary["actor"].startswith("finance:")
    item = item_of(summary, hold["id"])
    assert item is not None, summary["items"]
    assert item["action"] == "settled"
    assert item["charge"] == SMALL_CHARGE
    assert item["released"] == "0.0063"
    assert item["why"].startswith("open hold expired at ")
    assert "grace 0s" in item["why"] and "last checkpoint usage" in item["why"]
    after = get_hold(client, hold["id"])
    assert after["state"] == "settled"
    assert after["resolved_by"] == "reconciler"
    assert after["resolved_reason"] == item["why"]
    assert after["charge"]["amount"] == SMALL_CHARGE
    assert after["released"] == "0.0063"
    assert after["overage"] == "0"
    money = balance(client, account)
    assert (money["balance"], money["held"], money["available"]) == ("0.9993", "0", "0.9993")
    assert settle_txns(database, [hold["id"]]) == {hold["id"]: ["reserve", "settle"]}
    # The run's totals include this hold's money (other tests' holds may be in the same run).
    currency = after["currency"]
    assert summary["by_currency"][currency]["settled"] >= 1
    assert summary["charged_amount"] != "0"


def test_expired_hold_without_usage_is_released(client: TestClient[Any], account: str, database: str) -> None:
    hold = reserve(client, account, ttl=1)
    assert balance(client, account)["held"] == RESERVED
    wait_until_expired(hold)

    summary = api_run(client)

    item = item_of(summary, hold["id"])
    assert item is not None
    assert item["action"] == "released"
    assert item["charge"] is None
    assert item["released"] == RESERVED
    assert item["why"].endswith("no usage seen: released in full")
    after = get_hold(client, hold["id"])
    assert (after["state"], after["resolved_by"], after["released"]) == ("released", "reconciler", RESERVED)
    assert after["charge"] is None
    money = balance(client, account)
    assert (money["balance"], money["held"], money["available"]) == ("1", "0", "1")
    assert settle_txns(database, [hold["id"]]) == {hold["id"]: ["reserve", "release"]}


def test_a_hold_that_has_not_expired_is_left_alone(client: TestClient[Any], account: str) -> None:
    hold = reserve(client, account, ttl=600)
    checkpoint(client, hold["id"])
    summary = api_run(client)
    assert item_of(summary, hold["id"]) is None
    assert get_hold(client, hold["id"])["state"] == "open"
    assert balance(client, account)["held"] == RESERVED


def test_a_checkpoint_extends_the_hold_past_reconciliation(
    client: TestClient[Any], account: str, sa_url: str, settings: Any
) -> None:
    hold = reserve(client, account, ttl=2)
    time.sleep(1.2)
    hold = checkpoint(client, hold["id"])  # expires_at = now + 2 s again
    time.sleep(1.2)  # past the original expiry, not past the extended one
    summary = run_pass(sa_url, settings)
    assert item_of(summary, hold["id"]) is None
    assert get_hold(client, hold["id"])["state"] == "open"


def test_an_interrupted_hold_waits_for_its_grace(
    client: TestClient[Any], account: str, sa_url: str, settings: Any
) -> None:
    hold = reserve(client, account, ttl=600)
    interrupted = interrupt(client, hold["id"], {"prompt_tokens": 300, "completion_tokens": 20})

    before = run_pass(sa_url, settings, reconcile_grace_seconds=2)
    assert item_of(before, hold["id"]) is None
    assert get_hold(client, hold["id"])["state"] == "interrupted"
    assert balance(client, account)["held"] == RESERVED

    time.sleep(2.3)
    after = run_pass(sa_url, settings, reconcile_grace_seconds=2)

    item = item_of(after, hold["id"])
    assert item is not None
    assert after["grace_seconds"] == 2
    assert item["action"] == "settled"
    assert item["charge"] == "0.0008"  # 300 * 2 / 1e6 + 20 * 10 / 1e6
    assert item["why"].startswith(f"interrupted at {interrupted['interrupted_at']} + grace 2s")
    resolved = get_hold(client, hold["id"])
    assert (resolved["state"], resolved["resolved_by"]) == ("settled", "reconciler")
    money = balance(client, account)
    assert (money["balance"], money["held"], money["available"]) == ("0.9992", "0", "0.9992")


def test_an_interrupted_hold_without_usage_is_released_after_grace(
    client: TestClient[Any], account: str, sa_url: str, settings: Any
) -> None:
    hold = reserve(client, account, ttl=600)
    interrupt(client, hold["id"])
    time.sleep(1.2)
    summary = run_pass(sa_url, settings, reconcile_grace_seconds=1)
    item = item_of(summary, hold["id"])
    assert item is not None and item["action"] == "released"
    assert get_hold(client, hold["id"])["state"] == "released"
    assert balance(client, account)["held"] == "0"


def test_a_late_gateway_settle_after_the_reconciler_trues_up_exactly(
    client: TestClient[Any], account: str, database: str
) -> None:
    settled = reserve(client, account, ttl=1)
    checkpoint(client, settled["id"])
    released = reserve(client, account, ttl=1)
    wait_until_expired(get_hold(client, settled["id"]), released)
    summary = api_run(client)
    assert item_of(summary, settled["id"])["charge"] == SMALL_CHARGE  # type: ignore[index]
    assert item_of(summary, released["id"])["action"] == "released"  # type: ignore[index]
    assert balance(client, account)["balance"] == "0.9993"

    # The gateway comes back with the authoritative usage of both requests.
    final = {"prompt_tokens": 200, "completion_tokens": 80}  # 0.0004 + 0.0008 = 0.0012
    r = client.post(f"/v1/holds/{settled['id']}/settle", json={"usage": final}, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    trued = r.json()
    assert trued["state"] == "settled"
    assert trued["resolved_by"] == "reconciler"
    assert trued["charge"]["amount"] == "0.0012"
    assert trued["true_up"] == "0.0005"
    r = client.post(f"/v1/holds/{released['id']}/settle", json={"usage": SMALL}, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["true_up"], r.json()["charge"]["amount"]) == (
        "settled",
        "0.0007",
        "0.0007",
    )

    money = balance(client, account)
    assert (money["balance"], money["held"], money["available"]) == (
        "0.9981",
        "0",
        "0.9981",
    )  # 1 - 0.0012 - 0.0007
    assert settle_txns(database, [settled["id"], released["id"]]) == {
        settled["id"]: ["reserve", "settle", "true_up"],
        released["id"]: ["reserve", "release", "true_up"],
    }
    # The same settle again changes nothing.
    r = client.post(f"/v1/holds/{settled['id']}/settle", json={"usage": final}, headers=auth(GATEWAY))
    assert r.status_code == 200 and r.json()["true_up"] == "0.0005"
    assert balance(client, account)["balance"] == "0.9981"
    assert_integrity(client)


def test_a_hold_that_cannot_be_priced_is_reported_and_left_untouched(
    client: TestClient[Any], account: str, database: str, sa_url: str, settings: Any
) -> None:
    bad = reserve(client, account, ttl=1)
    checkpoint(client, bad["id"])
    good = reserve(client, account, ttl=1)
    checkpoint(client, good["id"])
    with psycopg.connect(database) as conn:  # a stored usage the pricing engine refuses
        conn.execute(
            'UPDATE holds SET usage = \'{"prompt_tokens": -5, "completion_tokens": 1}\' WHERE id = %s',
            (bad["id"],),
        )
    wait_until_expired(get_hold(client, bad["id"]), get_hold(client, good["id"]))

    summary = run_pass(sa_url, settings)

    assert summary["status"] == "succeeded"
    errors = [e for e in summary["errors"] if e["hold_id"] == bad["id"]]
    assert len(errors) == 1 and errors[0]["code"] == "usage_invalid"
    assert item_of(summary, bad["id"]) is None
    assert item_of(summary, good["id"]) is not None  # the rest of the batch still committed
    assert get_hold(client, bad["id"])["state"] == "open"
    assert get_hold(client, good["id"])["state"] == "settled"
    assert balance(client, account)["held"] == RESERVED

    with psycopg.connect(database) as conn:  # repaired, the next pass resolves it
        conn.execute(
            "UPDATE holds SET usage = %s::jsonb WHERE id = %s",
            ('{"prompt_tokens": 100, "completion_tokens": 50}', bad["id"]),
        )
    again = run_pass(sa_url, settings)
    assert item_of(again, bad["id"])["charge"] == SMALL_CHARGE  # type: ignore[index]
    assert balance(client, account)["held"] == "0"


def test_runs_are_recorded_listed_and_final(client: TestClient[Any], account: str, database: str) -> None:
    hold = reserve(client, account, ttl=1)
    wait_until_expired(hold)
    first = api_run(client)
    second = api_run(client)

    r = client.get("/admin/v1/reconciliation/runs", params={"limit": 1}, headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    page = r.json()
    assert [run["run_id"] for run in page["data"]] == [second["run_id"]]
    assert page["next_cursor"] == second["run_id"]
    r = client.get(
        "/admin/v1/reconciliation/runs",
        params={"limit": 1, "cursor": page["next_cursor"]},
        headers=auth(VIEWER),
    )
    assert [run["run_id"] for run in r.json()["data"]] == [first["run_id"]]
    listed = r.json()["data"][0]
    assert listed == first  # the stored run is exactly the summary the pass returned
    assert item_of(listed, hold["id"])["action"] == "released"  # type: ignore[index]

    r = client.get(
        "/admin/v1/reconciliation/runs", params={"nonempty": "true", "limit": 100}, headers=auth(VIEWER)
    )
    busy = r.json()["data"]
    assert first["run_id"] in [run["run_id"] for run in busy]
    assert all(
        run["settled"] + run["released"] > 0 or run["errors"] or run["status"] != "succeeded" for run in busy
    )

    audit = client.get("/admin/v1/audit-log", params={"target": first["run_id"]}, headers=auth(VIEWER)).json()
    assert [(e["action"], e["role"]) for e in audit["data"]] == [("reconciliation.run", "finance")]
    assert audit["data"][0]["details"]["released"] >= 1
    # An empty pass (nothing resolved, no errors) is a run row only, never an audit entry.
    empty = api_run(client)
    assert (empty["settled"], empty["released"], empty["errors"]) == (0, 0, [])
    audit = client.get("/admin/v1/audit-log", params={"target": empty["run_id"]}, headers=auth(VIEWER)).json()
    assert audit["data"] == []

    r = client.get(f"/admin/v1/reconciliation/runs/{first['run_id']}", headers=auth(VIEWER))
    assert r.status_code == 200 and r.json() == first
    r = client.get("/admin/v1/reconciliation/runs/00000000-0000-0000-0000-000000000000", headers=auth(VIEWER))
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "reconciliation_run_not_found"
    r = client.get("/admin/v1/reconciliation/runs", params={"cursor": "nope"}, headers=auth(VIEWER))
    assert r.status_code == 422
    assert (r.json()["error"]["code"], r.json()["error"]["param"]) == ("validation_error", "cursor")

    # A finished run cannot be changed or deleted, by any SQL.
    with psycopg.connect(database) as conn:
        with pytest.raises(psycopg.errors.RestrictViolation):
            conn.execute(
                "UPDATE reconciliation_runs SET settled_count = 99 WHERE id = %s", (first["run_id"],)
            )
        conn.rollback()
        with pytest.raises(psycopg.errors.RestrictViolation):
            conn.execute("DELETE FROM reconciliation_runs WHERE id = %s", (first["run_id"],))


def test_running_a_pass_needs_finance(client: TestClient[Any]) -> None:
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(VIEWER))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(GATEWAY))
    assert r.status_code == 403
    r = client.post("/admin/v1/reconciliation/runs")
    assert r.status_code == 401
    assert set(r.json()["error"]) >= {"type", "code", "message", "param"}
    assert client.get("/admin/v1/reconciliation/runs", headers=auth(FINANCE)).status_code == 200


def _sample(metrics: str, name: str) -> float:
    line = next(line for line in metrics.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


def test_metrics_show_hold_gauges_and_lag_at_scrape_time(client: TestClient[Any], account: str) -> None:
    hold = reserve(client, account, ttl=1)
    wait_until_expired(hold, extra=1.2)
    metrics = client.get("/metrics").text
    assert _sample(metrics, "ledger_reconciliation_lag_seconds") >= 1
    assert _sample(metrics, 'ledger_holds{state="open"}') >= 1
    assert _sample(metrics, f'ledger_amount_held{{currency="{hold["currency"]}"}}') > 0
    api_run(client)
    metrics = client.get("/metrics").text
    assert _sample(metrics, "ledger_reconciliation_lag_seconds") == 0
