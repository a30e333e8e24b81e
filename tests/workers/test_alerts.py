"""Low-balance alerts end to end: crossings recorded at commit, signed delivery, retries,
concurrent passes, the append-only record, and the Dramatiq actor on a real Redis.

Amounts (the t-simple sheet: input 2, output 10 per 1M tokens): `cycle(max_output=250,
completion=500)` reserves 0.0045 and charges 0.007 (an overage of 0.0025, under the
review factor); `cycle(max_output=250, completion=250)` reserves and charges 0.0045.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, VIEWER, auth
from tests.workers.alerts import (
    SECRET,
    Receiver,
    cycle,
    deliver,
    deliveries,
    delivery_settings,
    deposit,
    events,
    receiving,
    set_alert,
)
from tests.workers.conftest import LEDGER, REPO, PrivateRedis, child_env


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


def test_a_settle_that_crosses_sends_one_signed_alert(
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    receiver: Receiver,
) -> None:
    account_id = make_account("0.01", currency=currency)
    alert = set_alert(client, account_id, "0.005", receiver.url)
    assert (alert["state"], alert["available"], alert["threshold"]) == ("above", "0.01", "0.005")

    # The reserve leaves 0.0055 available (above); the settle's overage takes it to 0.003.
    hold = cycle(client, account_id, max_output=250, completion=500)
    assert hold["charge"]["amount"] == "0.007"
    [event] = events(database, account_id)
    assert (event["kind"], event["status"], event["attempts"]) == ("below", "pending", 0)
    # The crossing movement is the settle: from 0.0055 (after the reserve) to 0.003.
    assert (event["available_before"], event["available_after"]) == ("0.005500000000", "0.003000000000")
    assert receiver.requests == []  # nothing is sent from the money path

    summary = deliver(sa_url, delivery_settings(settings))
    assert summary["sending"] is True and summary["delivered"] >= 1
    [request] = [r for r in receiver.requests if r.headers["Ledger-Event-Id"] == event["event_id"]]
    assert request.path == "/hooks/ledger"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Idempotency-Key"] == event["event_id"]
    fields = dict(p.split("=", 1) for p in request.headers["Ledger-Signature"].split(","))
    expected = hmac.new(
        SECRET.encode(), f"{fields['t']}.".encode() + request.body, hashlib.sha256
    ).hexdigest()
    assert fields["v1"] == expected
    assert abs(int(fields["t"]) - time.time()) < 60
    assert json.loads(request.body) == {
        "id": event["event_id"],
        "type": "balance.below_threshold",
        "account_id": account_id,
        "threshold": "0.005",
        "available_before": "0.0055",
        "available_after": "0.003",
        "currency": currency,
        "at": json.loads(request.body)["at"],
    }
    [event] = events(database, account_id)
    assert (event["status"], event["attempts"]) == ("delivered", 1)
    assert deliveries(database, event["id"]) == [(1, 200, True)]

    # A second pass sends nothing more; staying below sends nothing either.
    deliver(sa_url, delivery_settings(settings))
    cycle(client, account_id, max_output=100, completion=100)
    deliver(sa_url, delivery_settings(settings))
    assert len([r for r in receiver.requests if json.loads(r.body)["account_id"] == account_id]) == 1
    assert len(events(database, account_id)) == 1

    r = client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(FINANCE))
    assert r.status_code == 200, r.text
    [listed] = r.json()["data"]
    assert listed["id"] == event["event_id"] and listed["status"] == "delivered"
    assert [(d["attempt"], d["status_code"], d["delivered"]) for d in listed["deliveries"]] == [
        (1, 200, True)
    ]


def test_no_event_without_a_crossing(
    client: TestClient[Any], make_account: Any, currency: str, database: str
) -> None:
    account_id = make_account("1", currency=currency)
    set_alert(client, account_id, "0.5", "http://127.0.0.2:9/unused")
    for _ in range(3):
        cycle(client, account_id, max_output=250, completion=500)
    deposit(client, account_id, "0.25")
    assert events(database, account_id) == []

    # An account with no alert at all records nothing either.
    other = make_account("0.01", currency=currency)
    cycle(client, other, max_output=250, completion=500)
    assert events(database, other) == []


def test_rearms_after_a_deposit(
    client: TestClient[Any], make_account: Any, currency: str, database: str
) -> None:
    account_id = make_account("0.01", currency=currency)
    set_alert(client, account_id, "0.005", "http://127.0.0.2:9/unused")
    cycle(client, account_id, max_output=250, completion=500)  # settle: 0.0055 -> 0.003, below
    cycle(client, account_id, max_output=100, completion=100)  # 0.003 -> 0: still below, nothing
    deposit(client, account_id, "0.01")  # 0 -> 0.01: above (re-armed)
    cycle(client, account_id, max_output=250, completion=500)  # settle: 0.0055 -> 0.003, below again
    kinds = [(e["kind"], e["available_before"], e["available_after"]) for e in events(database, account_id)]
    assert kinds == [
        ("below", "0.005500000000", "0.003000000000"),
        ("above", "0.000000000000", "0.010000000000"),
        ("below", "0.005500000000", "0.003000000000"),
    ]
    r = client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER))
    assert r.json()["state"] == "below"


def test_a_reserve_crossing_counts_and_a_committed_state_decides(
    client: TestClient[Any], make_account: Any, currency: str, database: str, sql: psycopg.Connection[Any]
) -> None:
    """A reservation lowers available too; a rolled-back change records nothing."""
    account_id = make_account("0.01", currency=currency)
    set_alert(client, account_id, "0.008", "http://127.0.0.2:9/unused")
    cycle(client, account_id, max_output=250, completion=250)  # reserve: 0.0055 below; settle 0.0055
    assert [e["kind"] for e in events(database, account_id)] == ["below"]

    # credit_limit moves available as well: rolled back, no event; committed, one.
    sql.execute("UPDATE accounts SET credit_limit = 1 WHERE id = %s", (account_id,))
    sql.rollback()
    assert [e["kind"] for e in events(database, account_id)] == ["below"]
    sql.execute("UPDATE accounts SET credit_limit = 1 WHERE id = %s", (account_id,))
    sql.commit()
    assert [e["kind"] for e in events(database, account_id)] == ["below", "above"]


def test_a_failing_receiver_is_retried_until_it_answers(
    client: TestClient[Any], make_account: Any, currency: str, database: str, sa_url: str, settings: Any
) -> None:
    with receiving(statuses=[500, 500, 200]) as receiver:
        account_id = make_account("0.01", currency=currency)
        set_alert(client, account_id, "0.005", receiver.url)
        cycle(client, account_id, max_output=250, completion=500)
        [event] = events(database, account_id)

        # With a backoff, a failed attempt is not retried before it is due.
        deliver(sa_url, delivery_settings(settings, alert_retry_base_seconds=60))
        assert deliveries(database, event["id"]) == [(1, 500, False)]
        deliver(sa_url, delivery_settings(settings, alert_retry_base_seconds=60))
        assert deliveries(database, event["id"]) == [(1, 500, False)]
        with psycopg.connect(database) as conn:
            wait = conn.execute(
                "SELECT extract(epoch FROM next_attempt_at - now()) FROM alert_events WHERE id = %s",
                (event["id"],),
            ).fetchone()
        assert wait is not None and 50 < float(wait[0]) <= 60

    with receiving(statuses=[500, 500, 200]) as receiver:
        account_id = make_account("0.01", currency=currency)
        set_alert(client, account_id, "0.005", receiver.url)
        cycle(client, account_id, max_output=250, completion=500)
        [event] = events(database, account_id)
        deliver(sa_url, delivery_settings(settings))  # no backoff: retried within the pass
        assert deliveries(database, event["id"]) == [(1, 500, False), (2, 500, False), (3, 200, True)]
        [event] = events(database, account_id)
        assert (event["status"], event["attempts"]) == ("delivered", 3)
        ids = [r.headers["Idempotency-Key"] for r in receiver.requests]
        assert ids == [event["event_id"]] * 3  # the same event, the same key each time
        deliver(sa_url, delivery_settings(settings))
        assert len(receiver.requests) == 3


def test_a_corrected_url_applies_to_pending_events(
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    receiver: Receiver,
) -> None:
    account_id = make_account("0.01", currency=currency)
    set_alert(client, account_id, "0.005", "http://127.0.0.2:9/wrong")
    cycle(client, account_id, max_output=250, completion=500)
    set_alert(client, account_id, "0.005", receiver.url)  # fixed before anything was sent
    deliver(sa_url, delivery_settings(settings))
    [event] = events(database, account_id)
    assert event["status"] == "delivered"
    assert [json.loads(r.body)["id"] for r in receiver.requests] == [event["event_id"]]
    with psycopg.connect(database) as conn:
        urls = conn.execute(
            "SELECT e.webhook_url, d.webhook_url FROM alert_events e "
            "JOIN alert_deliveries d ON d.event_id = e.id WHERE e.id = %s",
            (event["id"],),
        ).fetchall()
    assert urls == [("http://127.0.0.2:9/wrong", receiver.url)]  # the event keeps what was configured


def test_attempts_are_bounded_then_the_event_fails(
    client: TestClient[Any], make_account: Any, currency: str, database: str, sa_url: str, settings: Any
) -> None:
    with receiving(statuses=[503] * 10) as receiver:
        account_id = make_account("0.01", currency=currency)
        set_alert(client, account_id, "0.005", receiver.url)
        cycle(client, account_id, max_output=250, completion=500)
        [event] = events(database, account_id)
        deliver(sa_url, delivery_settings(settings, alert_max_attempts=3))
        assert deliveries(database, event["id"]) == [(1, 503, False), (2, 503, False), (3, 503, False)]
        [event] = events(database, account_id)
        assert (event["status"], event["attempts"]) == ("failed", 3)
        deliver(sa_url, delivery_settings(settings, alert_max_attempts=3))
        assert len(receiver.requests) == 3


def test_without_a_secret_nothing_is_sent(
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    receiver: Receiver,
) -> None:
    account_id = make_account("0.01", currency=currency)
    alert = set_alert(client, account_id, "0.005", receiver.url)
    assert alert["delivery_enabled"] is False  # the session's settings have no LEDGER_WEBHOOK_SECRET
    cycle(client, account_id, max_output=250, completion=500)
    assert deliver(sa_url, settings)["sending"] is False
    [event] = events(database, account_id)
    assert (event["status"], event["attempts"]) == ("pending", 0)
    assert receiver.requests == []
    deliver(sa_url, delivery_settings(settings))  # once a secret is configured, it goes out
    assert [json.loads(r.body)["id"] for r in receiver.requests] == [event["event_id"]]


def test_two_passes_at_once_never_send_an_event_twice(
    client: TestClient[Any], make_account: Any, currency: str, database: str, sa_url: str, settings: Any
) -> None:
    with receiving(delay=0.2) as receiver:
        accounts = [make_account("0.01", currency=currency) for _ in range(6)]
        for account_id in accounts:
            set_alert(client, account_id, "0.005", receiver.url)
            cycle(client, account_id, max_output=250, completion=500)
        mine = {e["event_id"]: e["id"] for a in accounts for e in events(database, a)}
        assert len(mine) == 6

        results: list[dict[str, Any]] = []
        one_pass = delivery_settings(settings)

        def run() -> None:
            results.append(deliver(sa_url, one_pass))

        passes = [threading.Thread(target=run) for _ in range(2)]
        for p in passes:
            p.start()
        for p in passes:
            p.join(60)
        assert len(results) == 2
        assert all(r["delivered"] >= 1 for r in results)  # both passes did work, side by side
        sent = [
            r.headers["Ledger-Event-Id"] for r in receiver.requests if r.headers["Ledger-Event-Id"] in mine
        ]
        assert sorted(sent) == sorted(mine)  # each event exactly once
        for event_id in mine.values():
            assert deliveries(database, event_id) == [(1, 200, True)]


def test_the_record_is_append_only(
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    receiver: Receiver,
) -> None:
    account_id = make_account("0.01", currency=currency)
    set_alert(client, account_id, "0.005", receiver.url)
    cycle(client, account_id, max_output=250, completion=500)
    deliver(sa_url, delivery_settings(settings))
    [event] = events(database, account_id)
    assert event["status"] == "delivered"

    def refused(statement: str, *params: Any) -> str:
        with psycopg.connect(database) as conn:
            with pytest.raises(psycopg.errors.RestrictViolation) as raised:
                conn.execute(statement, params)
            conn.rollback()
        return str(raised.value)

    assert "refuses UPDATE" in refused(
        "UPDATE alert_deliveries SET status_code = 500 WHERE event_id = %s", event["id"]
    )
    refused("DELETE FROM alert_deliveries WHERE event_id = %s", event["id"])
    refused("TRUNCATE alert_deliveries CASCADE")
    assert "no longer changes" in refused(
        "UPDATE alert_events SET status = 'pending', finished_at = NULL WHERE id = %s", event["id"]
    )
    refused("DELETE FROM alert_events WHERE id = %s", event["id"])
    refused("DELETE FROM account_alerts WHERE account_id = %s", account_id)

    # A pending event may move only its delivery state.
    cycle(client, account_id, max_output=100, completion=100)
    deposit(client, account_id, "0.01")
    pending = [e for e in events(database, account_id) if e["status"] == "pending"]
    assert [e["kind"] for e in pending] == ["above"]
    assert "only the delivery state" in refused(
        "UPDATE alert_events SET available_after = 1000 WHERE id = %s", pending[0]["id"]
    )
    assert "only the delivery state" in refused(
        "UPDATE alert_events SET webhook_url = 'http://attacker.example/' WHERE id = %s", pending[0]["id"]
    )


def test_the_deliver_alerts_actor_runs_on_a_ledger_worker(
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    private_redis: PrivateRedis,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    from workers.actors import JobContext, register_actors
    from workers.broker import forget_broker, setup_broker

    account_id = make_account("0.01", currency=currency)
    set_alert(client, account_id, "0.005", receiver.url)
    cycle(client, account_id, max_output=250, completion=500)
    [event] = events(database, account_id)

    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [LEDGER, "worker", "--processes", "1", "--threads", "2"],
        env=child_env(
            LEDGER_DATABASE_URL=database,
            LEDGER_REDIS_URL=private_redis.url,
            LEDGER_WEBHOOK_SECRET=SECRET,
            LEDGER_WEBHOOK_ALLOW_HTTP="1",
            LEDGER_WEBHOOK_ALLOWED_NETWORKS="127.0.0.2/32",
            LEDGER_GATEWAY_TOKENS="unused",
            LEDGER_LOG_FORMAT="json",
        ),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    redis_settings = replace(settings, redis_url=private_redis.url)
    try:
        actors = register_actors(setup_broker(redis_settings), JobContext(redis_settings, sa_url))
        actors["deliver_alerts"].send()
        deadline = time.monotonic() + 60
        while events(database, account_id)[0]["status"] != "delivered":
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        mine = [r for r in receiver.requests if r.headers["Ledger-Event-Id"] == event["event_id"]]
        assert len(mine) == 1
        row = None
        while row is None:  # the job records its run after the pass, just after the event's commit
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            with psycopg.connect(database) as conn:
                row = conn.execute(
                    "SELECT ok, summary->>'delivered' FROM job_runs WHERE job = 'deliver_alerts' "
                    "ORDER BY id DESC LIMIT 1"
                ).fetchone()
            time.sleep(0.1)
        assert row[0] is True and int(row[1]) >= 1
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
        forget_broker(redis_settings)


def test_an_alert_that_cannot_be_written_never_undoes_the_movement(
    client: TestClient[Any], make_account: Any, currency: str, database: str
) -> None:
    """The crossing's writes fail (a sabotaging trigger, dropped after): the settle still commits."""
    account_id = make_account("0.01", currency=currency)
    set_alert(client, account_id, "0.005", "http://127.0.0.2:9/unused")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'sabotage'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER test_sabotage BEFORE INSERT ON alert_events "
            "FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse()"
        )
        try:
            hold = cycle(client, account_id, max_output=250, completion=500)
        finally:
            conn.execute("DROP TRIGGER test_sabotage ON alert_events")
    assert hold["state"] == "settled" and hold["charge"]["amount"] == "0.007"
    r = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY))
    assert r.json()["available"] == "0.003"
    assert events(database, account_id) == []
    # The flip was undone with the event, so the next committed movement records the crossing.
    deposit(client, account_id, "0.000001")
    assert [e["kind"] for e in events(database, account_id)] == ["below"]
