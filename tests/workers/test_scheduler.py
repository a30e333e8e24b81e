"""One scheduler fires the jobs; overlapping job runs skip; embedded mode reconciles on its own."""

from __future__ import annotations

import time
from dataclasses import replace
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from ledger.reconciliation.gauges import refresh
from tests.conftest import FINANCE, GATEWAY, VIEWER, auth, new_id
from tests.workers.conftest import SMALL_CHARGE, checkpoint, get_hold, reserve

NEVER = "0 0 1 1 *"  # cron: once a year, so only the job under test fires


def quiet(settings: Any, **changes: Any) -> Any:
    return replace(settings, price_refresh_cron=NEVER, integrity_cron=NEVER, reconcile_cron=NEVER, **changes)


def test_only_one_of_two_schedulers_leads_and_a_standby_takes_over(
    settings: Any, sa_url: str, database: str
) -> None:
    from workers.scheduler import LeaderScheduler

    fired: dict[str, list[str]] = {"a": [], "b": []}
    config = quiet(settings, reconcile_interval_seconds=1)
    a = LeaderScheduler(config, sa_url, fired["a"].append, standby_seconds=0.2)
    b = LeaderScheduler(config, sa_url, fired["b"].append, standby_seconds=0.2)
    try:
        assert a.step() is True and a.leading
        assert b.step() is False and not b.leading
        assert a.step() is True  # still the leader
        time.sleep(3.2)
        assert fired["a"].count("reconcile") >= 2
        assert fired["b"] == []

        # The leader's connection dies (crash, network): its lock is gone, it stops firing,
        # and the standby takes over at its next try.
        with psycopg.connect(database, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'ledger-scheduler-leader' AND datname = current_database()"
            ).fetchone()
            # pg_terminate_backend only signals: the lock is free once the backend has exited.
            deadline = time.monotonic() + 10
            while conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'ledger-scheduler-leader' AND datname = current_database()"
            ).fetchone() != (0,):
                assert time.monotonic() < deadline, "the terminated leader's backend did not exit"
                time.sleep(0.05)
        assert killed == (1,)
        assert b.step() is True and b.leading
        assert a.step() is False and not a.leading
        count = len(fired["a"])
        time.sleep(2.2)
        assert len(fired["a"]) == count
        assert fired["b"].count("reconcile") >= 1
    finally:
        a.stop()
        b.stop()


def test_cron_expressions_are_checked_at_start(settings: Any, sa_url: str) -> None:
    from workers.scheduler import LeaderScheduler, job_triggers

    triggers = job_triggers(settings)
    assert sorted(triggers) == [
        "check_integrity",
        "deliver_alerts",
        "expire_grants",
        "reconcile",
        "refresh_prices",
    ]
    assert "cron" in str(triggers["reconcile"])
    assert "interval" in str(job_triggers(replace(settings, reconcile_interval_seconds=5))["reconcile"])
    with pytest.raises(ValueError):
        LeaderScheduler(replace(settings, integrity_cron="every five minutes"), sa_url, print)


def test_a_job_whose_previous_run_still_holds_its_lock_skips(
    settings: Any, sa_url: str, database: str
) -> None:
    from ledger.metrics import integrity_value
    from workers.actors import JobContext, check_integrity
    from workers.locks import job_lock

    ctx = JobContext(settings, sa_url)

    def integrity_rows() -> int:
        with psycopg.connect(database) as conn:
            row = conn.execute("SELECT count(*) FROM job_runs WHERE job = 'check_integrity'").fetchone()
        assert row is not None
        return int(row[0])

    before = integrity_rows()
    with job_lock(sa_url, "check_integrity") as held:
        assert held
        with job_lock(sa_url, "check_integrity") as again:
            assert again is False  # a second taker does not get it
        assert check_integrity(ctx) == {"job": "check_integrity", "skipped": True}
        assert integrity_rows() == before
    done = check_integrity(ctx)
    assert done["skipped"] is False and done["ok"] is True
    assert done["summary"]["ok"] is True and done["summary"]["account_mismatches"] == []
    assert integrity_rows() == before + 1
    assert integrity_value() == 1


def test_the_integrity_job_records_a_mismatch_and_says_so(
    settings: Any, sa_url: str, database: str, account: str
) -> None:
    """A real mismatch (a cached balance edited behind the triggers' back) is recorded, not raised:
    ok=false in job_runs, the gauge at 0, one ERROR log line naming the account."""
    import structlog

    from ledger.metrics import integrity_value
    from workers.actors import JobContext, check_integrity

    def tamper(delta: str) -> None:
        with psycopg.connect(database) as conn:
            conn.execute("SET LOCAL session_replication_role = replica")  # bypass the guard triggers
            conn.execute(
                "UPDATE accounts SET balance = balance + %s::numeric WHERE id = %s", (delta, account)
            )

    tamper("1")
    try:
        with structlog.testing.capture_logs() as logs:
            result = check_integrity(JobContext(settings, sa_url))
    finally:
        tamper("-1")
    assert result["ok"] is False
    assert integrity_value() == 0
    mismatch = {
        "account_id": account,
        "balance": "2",
        "journal_balance": "1",
        "held": "0",
        "journal_held": "0",
    }
    assert result["summary"]["account_mismatches"] == [mismatch]
    errors = [e for e in logs if e["log_level"] == "error" and e["event"] == "integrity.mismatch"]
    assert len(errors) == 1 and errors[0]["account_mismatches"] == [mismatch]
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT ok, summary->'account_mismatches' FROM job_runs WHERE job = 'check_integrity' "
            "ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert row == (False, [mismatch])
    # Repaired, the next check passes and puts the gauge back.
    assert check_integrity(JobContext(settings, sa_url))["ok"] is True
    assert integrity_value() == 1


def test_the_reconcile_job_records_its_run_and_refreshes_the_gauges(
    client: TestClient[Any], account: str, settings: Any, sa_url: str, database: str
) -> None:
    from ledger.metrics import AMOUNT_HELD, RECONCILE_LAG
    from workers.actors import JobContext, reconcile
    from workers.runtime import runtime

    hold = checkpoint(client, reserve(client, account, ttl=1)["id"])
    time.sleep(2.5)  # eligible for more than a second by now
    gauges = runtime().call(sa_url, lambda engine: refresh(engine, grace=0))
    assert gauges.lag_seconds >= 1 and gauges.counts["open"] >= 1
    assert RECONCILE_LAG._value.get() >= 1
    held_before = AMOUNT_HELD.get(hold["currency"])
    assert held_before is not None

    result = reconcile(JobContext(settings, sa_url))

    assert result["ok"] is True and result["summary"]["status"] == "succeeded"
    assert get_hold(client, hold["id"])["resolved_by"] == "reconciler"
    assert RECONCILE_LAG._value.get() == 0
    assert AMOUNT_HELD.get(hold["currency"]) == held_before - Decimal("0.007")  # exact
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT ok, summary->>'run_id' FROM job_runs WHERE job = 'reconcile' ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert row == (True, result["summary"]["run_id"])


def test_embedded_serve_settles_an_orphaned_hold_by_itself(settings: Any, sa_url: str, currency: str) -> None:
    """The issue's demo: reserve with ttl 2, one checkpoint, wait; settled by the reconciler."""
    from ledger.app import create_app
    from ledger.bootstrap import startup_hooks

    embedded = quiet(settings, database_url=None, reconcile_interval_seconds=1, reconcile_grace_seconds=1)
    assert embedded.embedded
    on_startup, on_shutdown = startup_hooks(embedded, sa_url)
    assert len(on_startup) == 2 and len(on_shutdown) == 1
    app = create_app(embedded, sa_url, on_startup=on_startup, on_shutdown=on_shutdown)
    with TestClient(app) as client:
        account_id = new_id()
        client.post(
            "/admin/v1/accounts", json={"account_id": account_id, "currency": currency}, headers=auth(FINANCE)
        )
        client.post(
            f"/admin/v1/accounts/{account_id}/deposits",
            json={"idempotency_key": new_id("dep"), "amount": "1"},
            headers=auth(FINANCE),
        )
        hold = reserve(client, account_id, ttl=2)
        checkpoint(client, hold["id"])
        deadline = time.monotonic() + 20
        while (state := get_hold(client, hold["id"]))["state"] == "open":
            assert time.monotonic() < deadline, "the embedded jobs did not reconcile the hold"
            time.sleep(0.25)
        assert (state["state"], state["resolved_by"]) == ("settled", "reconciler")
        assert state["charge"]["amount"] == SMALL_CHARGE
        r = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY))
        assert (r.json()["balance"], r.json()["held"]) == ("0.9993", "0")
        runs = client.get(
            "/admin/v1/reconciliation/runs", params={"limit": 100}, headers=auth(FINANCE)
        ).json()
        mine = [run for run in runs["data"] if any(i["hold_id"] == hold["id"] for i in run["items"])]
        assert [(run["trigger"], run["actor"]) for run in mine] == [("embedded", "embedded")]


def test_the_grant_expiry_job_posts_expired_grants_out_and_records_counts(
    settings: Any, sa_url: str, database: str, make_account: Any, client: TestClient[Any]
) -> None:
    from tests.integration.test_grant_invariants import sql_grant
    from workers.actors import JobContext, expire_grants

    account_id = make_account("1")
    with psycopg.connect(database) as conn:
        grant_id = sql_grant(conn, account_id, "0.5", expires="now() - interval '1 second'")
    done = expire_grants(JobContext(settings, sa_url))
    assert done["skipped"] is False and done["ok"] is True
    assert done["summary"]["expired"] >= 1
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT summary FROM job_runs WHERE job = 'expire_grants' ORDER BY id DESC LIMIT 1"
        ).fetchone()
        left = conn.execute("SELECT remaining, expired FROM grants WHERE id = %s", (grant_id,)).fetchone()
    assert row is not None and row[0]["expired"] == done["summary"]["expired"]
    assert left is not None and (left[0], left[1]) == (0, Decimal("0.5"))
    assert expire_grants(JobContext(settings, sa_url))["ok"] is True  # a second run: nothing of it again
    with psycopg.connect(database) as conn:
        n = conn.execute(
            "SELECT count(*) FROM journal_transactions WHERE kind = 'grant_expiry' AND reference = %s",
            (grant_id,),
        ).fetchone()
    assert n is not None and n[0] == 1
    body = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER))
    assert (body.json()["paid"], body.json()["granted"]) == ("1", "0")
