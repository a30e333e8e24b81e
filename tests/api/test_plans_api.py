"""Price plans end to end against PostgreSQL: publish, assign, audit; holds pin the plan
revision and everything that charges them uses it (settle, reconciler); quotes and 402s
show it; plan revisions and materialised rates are append-only in the database."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import (
    FINANCE,
    GATEWAY,
    VIEWER,
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


def create_plan(
    client: TestClient[Any], currency: str, document: dict[str, Any], plan_id: str | None = None
) -> str:
    plan_id = plan_id or new_id("plan")
    r = client.post(
        "/admin/v1/plans",
        json={"plan_id": plan_id, "currency": currency, "document": document, "reason": "contract 42"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    return plan_id


def revise(client: TestClient[Any], plan_id: str, document: dict[str, Any]) -> dict[str, Any]:
    r = client.post(
        f"/admin/v1/plans/{plan_id}/revisions",
        json={"document": document, "reason": "renegotiated"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def assign(client: TestClient[Any], account_id: str, plan_id: str | None) -> Any:
    return client.put(
        f"/admin/v1/accounts/{account_id}/plan",
        json={"plan_id": plan_id, "reason": "sales"},
        headers=auth(FINANCE),
    )


@pytest.fixture
def planned(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    """A sheet of its own currency (input 2, output 10; A = 1000, O = 500), a plan of -10 %
    and an account holding 1 on it."""
    currency = fresh_currency()
    version = publish(client, simple_document(currency))
    plan_id = create_plan(client, currency, {"adjust_percent": "-10"})
    account_id = make_account("1", currency=currency)
    r = assign(client, account_id, plan_id)
    assert r.status_code == 200, r.text
    return {"currency": currency, "version": version, "plan": plan_id, "account": account_id}


def test_create_publish_assign_and_audit(
    client: TestClient[Any], planned: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    plan_id = planned["plan"]
    r = client.get(f"/admin/v1/plans/{plan_id}/revisions/1", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["document"] == {"adjust_percent": "-10", "models": {}}
    assert len(body["content_hash"]) == 64
    assert body["price_version"] == planned["version"]
    assert body["rates"] == [
        {
            "model": "t-simple",
            "max_input_tokens": 1000,
            "max_output_tokens": 500,
            "rates": {"input": "1.8", "output": "9"},
            "stored": True,  # materialised at publication
        }
    ]
    second = revise(client, plan_id, {"models": {"t-simple": {"rates": {"input": "1", "output": "5"}}}})
    assert second["revision"] == 2 and second["content_hash"] != body["content_hash"]
    assert client.get(f"/admin/v1/plans/{plan_id}", headers=auth(VIEWER)).json()["revision"] == 2
    listed = client.get("/admin/v1/plans?limit=500", headers=auth(VIEWER)).json()["data"]
    assert plan_id in [p["plan_id"] for p in listed]
    # the account moved to revision 2 with the plan
    row = sql.execute(
        "SELECT plan_id, plan_revision FROM accounts WHERE id = %s", (planned["account"],)
    ).fetchone()
    assert row == (plan_id, 2)
    account = client.get(f"/admin/v1/accounts/{planned['account']}", headers=auth(VIEWER)).json()
    assert account["plan"] == {"id": plan_id, "revision": 2}
    actions = [
        a
        for (a,) in sql.execute(
            "SELECT action FROM audit_log WHERE target IN (%s, %s) ORDER BY id", (plan_id, planned["account"])
        )
    ]
    assert [a for a in actions if "plan" in a] == ["plan.create", "account.plan", "plan.revise"]
    # refusals: taken id, unknown plan, invalid document, currency mismatch; nothing written
    r = client.post(
        "/admin/v1/plans",
        json={"plan_id": plan_id, "currency": planned["currency"], "document": {}, "reason": "x"},
        headers=auth(FINANCE),
    )
    assert (r.status_code, r.json()["error"]["code"]) == (409, "plan_exists")
    r = client.post(
        "/admin/v1/plans/nope-plan/revisions", json={"document": {}, "reason": "x"}, headers=auth(FINANCE)
    )
    assert (r.status_code, r.json()["error"]["code"]) == (404, "plan_not_found")
    r = client.post(
        f"/admin/v1/plans/{plan_id}/revisions",
        json={"document": {"adjust_percent": "-101"}, "reason": "x"},
        headers=auth(FINANCE),
    )
    assert (r.status_code, r.json()["error"]["param"]) == (422, "document.adjust_percent")
    r = client.post(
        f"/admin/v1/plans/{plan_id}/revisions",
        json={"document": {"models": {"t-simple": {"rates": {"input": "1"}}}}, "reason": "x"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 422
    assert client.get(f"/admin/v1/plans/{plan_id}", headers=auth(VIEWER)).json()["revision"] == 2
    other = create_plan(client, fresh_currency(), {})
    r = assign(client, planned["account"], other)
    assert (r.status_code, r.json()["error"]["param"]) == (422, "plan_id")
    assert (assign(client, planned["account"], "no-such-plan")).status_code == 404


def test_a_rate_above_the_maximum_refuses_the_plan(client: TestClient[Any]) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency, input_rate="200000"))
    plan_id = new_id("plan")
    r = client.post(
        "/admin/v1/plans",
        json={"plan_id": plan_id, "currency": currency, "document": {"adjust_percent": "500"}, "reason": "x"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 422, r.text
    assert client.get(f"/admin/v1/plans/{plan_id}", headers=auth(VIEWER)).status_code == 404


def journal_of(sql: psycopg.Connection[Any], hold_id: str, kind: str) -> list[Decimal]:
    rows = sql.execute(
        "SELECT e.amount FROM journal_entries e JOIN journal_transactions t ON t.id = e.transaction_id "
        "WHERE t.hold_id = %s AND t.kind = %s ORDER BY e.id",
        (hold_id, kind),
    ).fetchall()
    return [r[0] for r in rows]


def test_reserve_and_settle_at_the_pinned_revision(
    client: TestClient[Any], planned: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    account_id, plan_id = planned["account"], planned["plan"]
    r = reserve(client, account_id)
    assert r.status_code == 201, r.text
    hold = r.json()
    assert hold["plan"] == {"id": plan_id, "revision": 1}
    assert hold["amount"] == "0.0063"  # 1000 x 1.8 + 500 x 9, per 1M
    assert hold["reservation"]["input_rate"] == "1.8"
    # a revision published between reserve and settle: the settle uses the pinned one
    revise(client, plan_id, {"adjust_percent": "50"})
    r = call(client, hold["id"], "settle", usage(100, 10))
    assert r.status_code == 200, r.text
    settled = r.json()
    assert settled["charge"]["amount"] == "0.00027"  # 100 x 1.8 + 10 x 9, per 1M
    assert settled["plan"] == {"id": plan_id, "revision": 1}
    assert Decimal("0.00027") in journal_of(sql, hold["id"], "settle")
    assert balance(client, account_id)["balance"] == "0.99973"
    # this process cached revision 1: the batch answers 'plan' and the reserve sizes again
    r = reserve(client, account_id)
    assert r.status_code == 201, r.text
    assert r.json()["plan"] == {"id": plan_id, "revision": 2}
    assert r.json()["amount"] == "0.0105"  # 1000 x 3 + 500 x 15, per 1M
    stored = sql.execute(
        "SELECT plan_id, plan_revision FROM holds WHERE id = %s", (r.json()["id"],)
    ).fetchone()
    assert stored == (plan_id, 2)


def test_a_plan_assigned_while_the_account_is_cached(client: TestClient[Any], make_account: Any) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account_id = make_account("1", currency=currency)
    first = reserve(client, account_id).json()  # caches the account: list rates
    assert first["plan"] is None and first["amount"] == "0.007"
    plan_id = create_plan(client, currency, {"models": {"t-simple": {"adjust_percent": "-50"}}})
    assert assign(client, account_id, plan_id).status_code == 200
    second = reserve(client, account_id).json()
    assert second["plan"] == {"id": plan_id, "revision": 1} and second["amount"] == "0.0035"
    assert assign(client, account_id, None).status_code == 200
    third = reserve(client, account_id).json()
    assert third["plan"] is None and third["amount"] == "0.007"
    r = call(client, second["id"], "settle", usage(1000, 500))
    assert r.json()["charge"]["amount"] == "0.0035"


def test_quotes_with_an_account_price_with_its_plan(client: TestClient[Any], planned: dict[str, Any]) -> None:
    body = {
        "model": "t-simple",
        "account_id": planned["account"],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
    }
    r = client.post("/v1/quotes", json=body, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    assert r.json()["charge"]["amount"] == "0.00027"
    assert r.json()["plan"] == {"id": planned["plan"], "revision": 1}
    r = client.post(
        "/v1/quotes", json={"model": "t-simple", "account_id": planned["account"]}, headers=auth(GATEWAY)
    )
    assert r.json()["reservation"]["amount"] == "0.0063"
    r = client.post(
        "/v1/quotes",
        json={
            "model": "t-simple",
            "currency": planned["currency"],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        },
        headers=auth(GATEWAY),
    )
    assert r.json()["charge"]["amount"] == "0.0003" and "plan" not in r.json()
    r = client.post(
        "/v1/quotes", json={"model": "t-simple", "account_id": "nobody-here"}, headers=auth(GATEWAY)
    )
    assert (r.status_code, r.json()["error"]["code"]) == (404, "account_not_found")


def test_insufficient_funds_shows_the_plan(
    client: TestClient[Any], planned: dict[str, Any], make_account: Any
) -> None:
    poor = make_account("0.001", currency=planned["currency"])
    assert assign(client, poor, planned["plan"]).status_code == 200
    r = reserve(client, poor)
    assert r.status_code == 402, r.text
    error = r.json()["error"]
    assert error["plan"] == {"id": planned["plan"], "revision": 1}
    assert error["reservation"]["output_rate"] == "9"


def test_the_reconciler_and_a_true_up_charge_the_pinned_revision(
    client: TestClient[Any], planned: dict[str, Any]
) -> None:
    hold = reserve(client, planned["account"], ttl_seconds=1).json()
    r = client.post(f"/v1/holds/{hold['id']}/usage", json=usage(100, 10), headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    revise(client, planned["plan"], {"adjust_percent": "900"})
    time.sleep(2.2)  # the checkpoint extended its expiry by the TTL
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))
    assert r.status_code in (200, 201), r.text
    done = client.get(f"/v1/holds/{hold['id']}", headers=auth(GATEWAY)).json()
    assert (done["state"], done["resolved_by"]) == ("settled", "reconciler")
    assert done["charge"]["amount"] == "0.00027"
    assert done["plan"] == {"id": planned["plan"], "revision": 1}
    # the gateway's late settle is a true-up, at the pinned revision too
    r = call(client, hold["id"], "settle", usage(200, 20))
    assert r.status_code == 200, r.text
    assert (r.json()["charge"]["amount"], r.json()["true_up"]) == ("0.00054", "0.00027")


def test_plan_revisions_and_rates_refuse_direct_changes(
    planned: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    for statement in (
        "UPDATE plan_revisions SET reason = 'x' WHERE plan_id = %s",
        "DELETE FROM plan_revisions WHERE plan_id = %s",
        "UPDATE plan_rates SET price = '{}' WHERE plan_id = %s",
        "DELETE FROM plan_rates WHERE plan_id = %s",
    ):
        with pytest.raises(psycopg.errors.RestrictViolation):
            sql.execute(statement, (planned["plan"],))
        sql.rollback()
    assert sql.execute(
        "SELECT count(*) FROM plan_rates WHERE plan_id = %s", (planned["plan"],)
    ).fetchone() == (1,)


def test_parallel_reserves_while_a_revision_is_published(
    client: TestClient[Any], planned: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    """Nothing overspends, every hold pins a revision that existed, settles charge its rates."""
    account_id, plan_id = planned["account"], planned["plan"]
    results: list[Any] = []

    def worker() -> None:
        for _ in range(6):
            results.append(reserve(client, account_id))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    revise(client, plan_id, {"adjust_percent": "100"})
    for t in threads:
        t.join()
    holds = [r.json() for r in results if r.status_code == 201]
    assert all(r.status_code in (201, 402) for r in results)
    amounts = {1: "0.0063", 2: "0.014"}
    for hold in holds:
        assert hold["plan"]["id"] == plan_id and hold["plan"]["revision"] in amounts
        assert hold["amount"] == amounts[hold["plan"]["revision"]]
    total = sum(Decimal(h["amount"]) for h in holds)
    assert total <= 1
    assert Decimal(balance(client, account_id)["held"]) == total
    charges = {1: "0.00027", 2: "0.0006"}
    for hold in holds:
        r = call(client, hold["id"], "settle", usage(100, 10))
        assert r.json()["charge"]["amount"] == charges[hold["plan"]["revision"]]


def test_revenue_by_plan_sums_to_the_same_total(client: TestClient[Any], planned: dict[str, Any]) -> None:
    currency, account_id = planned["currency"], planned["account"]
    call(client, reserve(client, account_id).json()["id"], "settle", usage(100, 10))  # 0.00027 on the plan
    assert assign(client, account_id, None).status_code == 200
    call(client, reserve(client, account_id).json()["id"], "settle", usage(100, 10))  # 0.0003 at list
    reports = {}
    for group_by in ("plan", "model"):
        r = client.get(
            f"/admin/v1/reports/revenue?currency={currency}&group_by={group_by}", headers=auth(VIEWER)
        )
        assert r.status_code == 200, r.text
        reports[group_by] = r.json()
    assert reports["plan"]["total"] == reports["model"]["total"] == "0.00057"
    assert {g["key"]: g["amount"] for g in reports["plan"]["groups"]} == {
        planned["plan"]: "0.00027",
        "(list)": "0.0003",
    }
    r = client.get(
        f"/admin/v1/reports/revenue?currency={currency}&group_by=plan&format=csv", headers=auth(VIEWER)
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv"), r.text
    rows = [line.split(",") for line in r.text.strip().splitlines()]
    assert [row[:2] for row in rows[1:]] == [
        ["(list)", "0.0003"],
        [planned["plan"], "0.00027"],
        ["total", "0.00057"],
    ]


def test_rates_are_materialised_for_every_version_in_use(
    client: TestClient[Any], planned: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    """A price version published later (scheduled) gets the plan's current revision's rates in
    its publishing transaction, and a new revision gets them for the active and scheduled ones."""
    plan_id, currency = planned["plan"], planned["currency"]
    future = publish(client, simple_document(currency, input_rate="4", effective_at="2031-01-01T00:00:00Z"))
    rows = sql.execute(
        "SELECT revision, price ->> 'rates' FROM plan_rates WHERE plan_id = %s AND price_version = %s",
        (plan_id, future),
    ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [(1, '{"input": "3.6", "output": "9"}')]
    # a new revision: stored for the active and the scheduled version at once
    revise(client, plan_id, {"adjust_percent": "-25"})
    versions = {
        v
        for (v,) in sql.execute(
            "SELECT price_version FROM plan_rates WHERE plan_id = %s AND revision = 2", (plan_id,)
        )
    }
    assert versions == {planned["version"], future}
    # revision 1 was never stored at a version that precedes it: read materialises it
    other = publish(client, simple_document(fresh_currency()))
    r = client.get(f"/admin/v1/plans/{plan_id}/revisions/1?price_version={other}", headers=auth(VIEWER))
    assert (r.status_code, r.json()["error"]["param"]) == (422, "price_version")  # another currency
    r = client.get(f"/admin/v1/plans/{plan_id}/revisions/2?price_version={future}", headers=auth(VIEWER))
    assert r.json()["rates"][0]["rates"] == {"input": "3", "output": "7.5"}
    assert client.get(f"/admin/v1/plans/{plan_id}/revisions/3", headers=auth(VIEWER)).status_code == 404
    assert client.get(f"/admin/v1/plans/{plan_id}/revisions/x", headers=auth(VIEWER)).status_code == 404


def test_a_pinned_version_without_stored_rates_is_materialised_on_first_use(
    client: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    currency = fresh_currency()
    old = publish(client, simple_document(currency))
    plan_id = create_plan(client, currency, {"adjust_percent": "-10"})
    publish(client, simple_document(currency, input_rate="3"))  # supersedes `old`, within the grace
    # revision 2 is published after `old` was superseded: nothing stored for it at `old`
    revise(client, plan_id, {"adjust_percent": "-20"})
    stored = sql.execute(
        "SELECT count(*) FROM plan_rates WHERE plan_id = %s AND revision = 2 AND price_version = %s",
        (plan_id, old),
    ).fetchone()
    assert stored == (0,)
    account_id = make_account("1", currency=currency)
    assert assign(client, account_id, plan_id).status_code == 200
    r = reserve(client, account_id, price_version=old)
    assert r.status_code == 201, r.text
    assert r.json()["amount"] == "0.0056"  # 1000 x 1.6 + 500 x 8, per 1M: the old list at -20 %
    stored = sql.execute(
        "SELECT price ->> 'rates' FROM plan_rates WHERE plan_id = %s AND revision = 2 AND price_version = %s",
        (plan_id, old),
    ).fetchone()
    assert stored == ('{"input": "1.6", "output": "8"}',)


# --- review fixes -------------------------------------------------------------------------


def two_model_document(currency: str, *, input_rate: str = "2") -> dict[str, Any]:
    """`t-simple` (A = 1000, O = 500, max_n 2) and `t-retired` (retired in 2020)."""
    doc = simple_document(currency, input_rate=input_rate)
    doc["models"][0]["max_n"] = 2
    doc["models"].append(
        {
            "model": "t-retired",
            "max_input_tokens": 1000,
            "max_output_tokens": 500,
            "retires_at": "2020-01-01T00:00:00Z",
            "rates": {"input": "1", "output": "5"},
        }
    )
    return doc


def rate_rows(sql: psycopg.Connection[Any], plan_id: str, revision: int, version: str) -> list[str]:
    rows = sql.execute(
        "SELECT model FROM plan_rates WHERE plan_id = %s AND revision = %s AND price_version = %s "
        "ORDER BY model",
        (plan_id, revision, version),
    ).fetchall()
    sql.rollback()
    return [m for (m,) in rows]


@pytest.fixture
def stale_pair(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    """A planned account whose current revision (2) has no stored rate at `old`, a version
    superseded within the pin grace: the pair a first use would materialise."""
    currency = fresh_currency()
    old = publish(client, two_model_document(currency))
    plan_id = create_plan(client, currency, {"adjust_percent": "-10"})
    publish(client, two_model_document(currency, input_rate="3"))  # supersedes `old`
    revise(client, plan_id, {"adjust_percent": "-20"})  # stored at the new version only
    account_id = make_account("1", currency=currency)
    assert assign(client, account_id, plan_id).status_code == 200
    return {"currency": currency, "old": old, "plan": plan_id, "account": account_id}


def test_an_assignment_waits_for_a_publication_in_flight_and_takes_its_revision(
    client: TestClient[Any], planned: dict[str, Any], make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    """A revision being published (the plan row locked, revision 2 current, uncommitted): an
    assignment of another account to the plan waits, then ends on revision 2, not 1."""
    plan_id = planned["plan"]
    account_id = make_account("1", currency=planned["currency"])
    sql.execute("SELECT revision FROM plans WHERE id = %s FOR UPDATE", (plan_id,))
    sql.execute(
        "INSERT INTO plan_revisions (plan_id, revision, document, content_hash, created_by, reason) "
        "VALUES (%s, 2, %s, %s, 'test', 'race')",
        (plan_id, '{"adjust_percent": "-20", "models": {}}', "0" * 64),
    )
    sql.execute("UPDATE plans SET revision = 2 WHERE id = %s", (plan_id,))
    sql.execute("SELECT id FROM accounts WHERE plan_id = %s ORDER BY id FOR UPDATE", (plan_id,))
    sql.execute("UPDATE accounts SET plan_revision = 2 WHERE plan_id = %s", (plan_id,))
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(assign(client, account_id, plan_id)))
    worker.start()
    worker.join(0.7)
    waited = worker.is_alive()
    sql.commit()
    worker.join(10)
    assert waited, "the assignment did not wait for the publication"
    assert results[0].status_code == 200, results[0].text
    assert results[0].json()["plan"] == {"id": plan_id, "revision": 2}
    assert sql.execute("SELECT plan_revision FROM accounts WHERE id = %s", (account_id,)).fetchone() == (2,)


def test_publishing_locks_the_plan_s_accounts_in_id_order(
    client: TestClient[Any], planned: dict[str, Any], make_account: Any, database: str
) -> None:
    """The batch locks accounts by id; so does a publication: with the lowest account of the
    plan locked elsewhere, the publication waits on it holding no other account's lock (in
    scan order it would lock the later-written, higher-id one first: a deadlock with a batch)."""
    plan_id, currency = planned["plan"], planned["currency"]
    accounts = sorted([planned["account"], *(make_account("1", currency=currency) for _ in range(2))])
    for account_id in accounts[1:]:
        assert assign(client, account_id, plan_id).status_code == 200
    # the lowest id's row version is written last (the end of any scan)
    assert assign(client, accounts[0], None).status_code == 200
    assert assign(client, accounts[0], plan_id).status_code == 200
    with psycopg.connect(database) as holder, psycopg.connect(database) as probe:
        holder.execute("SELECT id FROM accounts WHERE id = %s FOR UPDATE", (accounts[0],))
        results: list[Any] = []
        worker = threading.Thread(
            target=lambda: results.append(revise(client, plan_id, {"adjust_percent": "-30"}))
        )
        worker.start()
        worker.join(0.7)
        assert worker.is_alive()
        try:
            for account_id in accounts[1:]:
                probe.execute("SELECT id FROM accounts WHERE id = %s FOR UPDATE NOWAIT", (account_id,))
        finally:
            probe.rollback()
            holder.rollback()
            worker.join(10)
    assert results[0]["revision"] == 2
    for account_id in accounts:
        assert client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER)).json()["plan"] == {
            "id": plan_id,
            "revision": 2,
        }


def test_plan_and_price_publications_of_a_currency_serialise(
    client: TestClient[Any], planned: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    """Both publications take the currency's plan-rates lock, so run together each sees the
    other's: the new revision has stored (and checked) rates at the new version."""
    plan_id, currency = planned["plan"], planned["currency"]
    sql.execute("SELECT pg_advisory_xact_lock(72431003, hashtext(%s))", (currency,))
    results: dict[str, Any] = {}
    workers = [
        threading.Thread(
            target=lambda: results.__setitem__(
                "version", publish(client, simple_document(currency, input_rate="4"))
            )
        ),
        threading.Thread(
            target=lambda: results.__setitem__("revision", revise(client, plan_id, {"adjust_percent": "-50"}))
        ),
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(0.7)
    waited = all(w.is_alive() for w in workers)
    sql.rollback()
    for w in workers:
        w.join(10)
    assert waited, "a publication did not take the currency's plan-rates lock"
    assert results["revision"]["revision"] == 2
    assert rate_rows(sql, plan_id, 2, results["version"]) == ["t-simple"]
    assert rate_rows(sql, plan_id, 1, results["version"]) in (["t-simple"], [])


def test_a_viewer_s_read_writes_nothing_and_shows_every_model(
    client: TestClient[Any], stale_pair: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    plan_id, old = stale_pair["plan"], stale_pair["old"]
    url = f"/admin/v1/plans/{plan_id}/revisions/2?price_version={old}"
    r = client.get(url, headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    assert [(m["model"], m["stored"]) for m in r.json()["rates"]] == [
        ("t-retired", False),
        ("t-simple", False),
    ]
    assert r.json()["rates"][1]["rates"] == {"input": "1.6", "output": "8"}
    assert rate_rows(sql, plan_id, 2, old) == []  # the read wrote nothing
    # a first use stores one model: the read shows it stored, and the other computed
    assert reserve(client, stale_pair["account"], price_version=old).status_code == 201
    assert rate_rows(sql, plan_id, 2, old) == ["t-simple"]
    rates = client.get(url, headers=auth(VIEWER)).json()["rates"]
    assert [(m["model"], m["stored"]) for m in rates] == [("t-retired", False), ("t-simple", True)]
    assert rates[0]["rates"] == {"input": "0.8", "output": "4"}
    assert rates[1]["rates"] == {"input": "1.6", "output": "8"}
    assert rate_rows(sql, plan_id, 2, old) == ["t-simple"]
    # at the current version everything is stored at publication
    current = client.get(f"/admin/v1/plans/{plan_id}/revisions/2", headers=auth(VIEWER)).json()["rates"]
    assert all(m["stored"] for m in current) and len(current) == 2


def test_a_refused_reserve_or_quote_materialises_no_rate(
    client: TestClient[Any], stale_pair: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    plan_id, old, account_id = stale_pair["plan"], stale_pair["old"], stale_pair["account"]
    r = reserve(client, account_id, "t-retired", price_version=old)
    assert (r.status_code, r.json()["error"]["code"]) == (410, "model_retired")
    assert reserve(client, account_id, price_version=old, max_output_tokens=501).status_code == 422
    assert reserve(client, account_id, price_version=old, n=3).status_code == 422
    for path, token in (("/v1/quotes", GATEWAY), ("/admin/v1/quotes", VIEWER)):
        base = {"account_id": account_id, "price_version": old}
        r = client.post(path, json={**base, "model": "t-retired"}, headers=auth(token))
        assert r.status_code == 410, r.text
        r = client.post(
            path, json={**base, "model": "t-simple", "max_output_tokens": 501}, headers=auth(token)
        )
        assert r.status_code == 422, r.text
        r = client.post(
            path,
            json={**base, "model": "t-simple", "usage": {"prompt_tokens": 1001, "completion_tokens": 1}},
            headers=auth(token),
        )
        assert r.status_code == 422, r.text
    assert rate_rows(sql, plan_id, 2, old) == []
    # the same reserve within the limits stores the model's rate (first use)
    assert reserve(client, account_id, price_version=old, n=2).status_code == 201
    assert rate_rows(sql, plan_id, 2, old) == ["t-simple"]


def test_a_quote_s_currency_must_be_the_account_s(client: TestClient[Any], planned: dict[str, Any]) -> None:
    body = {"model": "t-simple", "max_output_tokens": 100, "account_id": planned["account"]}
    r = client.post("/v1/quotes", json={**body, "currency": "USD"}, headers=auth(GATEWAY))
    assert (r.status_code, r.json()["error"]["param"]) == (422, "currency"), r.text
    assert planned["currency"] in r.json()["error"]["message"]
    for extra in ({}, {"currency": planned["currency"]}):
        r = client.post("/v1/quotes", json={**body, **extra}, headers=auth(GATEWAY))
        assert r.status_code == 200, r.text
        assert r.json()["plan"] == {"id": planned["plan"], "revision": 1}
    # without an account: the currency given (USD by default), list rates, no `plan`
    r = client.post(
        "/v1/quotes",
        json={"model": "t-simple", "max_output_tokens": 100, "currency": planned["currency"]},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200 and "plan" not in r.json(), r.text


def test_budget_exceeded_shows_the_plan(client: TestClient[Any], planned: dict[str, Any]) -> None:
    account_id = planned["account"]
    r = client.put(
        f"/admin/v1/accounts/{account_id}/budgets/proj",
        json={"amount": "0.001", "period": "daily", "reason": "test"},
        headers=auth(FINANCE),
    )
    assert r.status_code in (200, 201), r.text
    r = reserve(client, account_id, budget_key="proj")
    assert (r.status_code, r.json()["error"]["code"]) == (402, "budget_exceeded"), r.text
    assert r.json()["error"]["plan"] == {"id": planned["plan"], "revision": 1}


def test_plans_refuse_direct_changes_but_the_next_revision(
    planned: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    plan_id = planned["plan"]
    for statement in (
        "UPDATE plans SET id = id || 'x' WHERE id = %s",
        "UPDATE plans SET currency = 'ZZZ' WHERE id = %s",
        "UPDATE plans SET created_at = created_at - interval '1 day' WHERE id = %s",
        "UPDATE plans SET created_by = 'someone' WHERE id = %s",
        "UPDATE plans SET revision = revision + 2 WHERE id = %s",
        "DELETE FROM plans WHERE id = %s",
    ):
        with pytest.raises(psycopg.errors.RestrictViolation):
            sql.execute(statement, (plan_id,))
        sql.rollback()
    # moving back: refused by the guard (the revision exists, so not the foreign key)
    sql.execute(
        "INSERT INTO plan_revisions (plan_id, revision, document, content_hash, created_by, reason) "
        "VALUES (%s, 2, '{}', %s, 'test', 'guard')",
        (plan_id, "0" * 64),
    )
    sql.execute("UPDATE plans SET revision = 2 WHERE id = %s", (plan_id,))  # the next one: allowed
    with pytest.raises(psycopg.errors.RestrictViolation):
        sql.execute("UPDATE plans SET revision = 1 WHERE id = %s", (plan_id,))
    sql.rollback()
    assert sql.execute("SELECT revision FROM plans WHERE id = %s", (plan_id,)).fetchone() == (1,)
