"""Dramatiq on a real (private) Redis: a `ledger worker` process runs an enqueued reconcile;
and the hot path keeps working with Redis gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from litestar.testing import TestClient

from tests.conftest import ADMIN, GATEWAY, auth, new_id, open_account
from tests.workers.conftest import (
    LEDGER,
    MODEL,
    REPO,
    SMALL,
    SMALL_CHARGE,
    PrivateRedis,
    checkpoint,
    child_env,
    get_hold,
    reserve,
    wait_until_expired,
)

DEAD_REDIS = "redis://127.0.0.1:1/0"


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_ledger_worker_runs_an_enqueued_reconcile(
    client: TestClient[Any],
    account: str,
    database: str,
    sa_url: str,
    settings: Any,
    private_redis: PrivateRedis,
    tmp_path: Path,
) -> None:
    from ledger.metrics import JOB_EVENTS
    from workers.actors import JobContext, register_actors
    from workers.broker import forget_broker, setup_broker
    from workers.scheduler import enqueuer

    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [LEDGER, "worker", "--processes", "1", "--threads", "2"],
        env=child_env(
            LEDGER_DATABASE_URL=database,
            LEDGER_REDIS_URL=private_redis.url,
            LEDGER_RECONCILE_GRACE_SECONDS="0",
            LEDGER_GATEWAY_TOKENS="unused",
            LEDGER_LOG_FORMAT="json",
        ),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    redis_settings = replace(settings, redis_url=private_redis.url)
    try:
        hold = checkpoint(client, reserve(client, account, ttl=1)["id"])
        wait_until_expired(hold)
        broker = setup_broker(redis_settings)
        assert setup_broker(redis_settings) is broker  # idempotent
        actors = register_actors(broker, JobContext(redis_settings, sa_url))
        message = actors["reconcile"].send()
        assert message.actor_name == "reconcile" and message.queue_name == "ledger"

        resolved = wait_for(
            lambda: (h := get_hold(client, hold["id"]))["state"] == "settled" and h,
            60,
            f"the worker to settle the hold (log: {log.read_text()[-2000:] if log.exists() else ''})",
        )
        assert resolved["resolved_by"] == "reconciler"
        assert resolved["charge"]["amount"] == SMALL_CHARGE
        with psycopg.connect(database, autocommit=True) as conn:
            # The pass commits the hold's batch before it finishes its run row: wait for that.
            run = wait_for(
                lambda: (
                    (
                        row := conn.execute(
                            "SELECT trigger, actor, status FROM reconciliation_runs WHERE items @> %s::jsonb",
                            (f'[{{"hold_id": "{hold["id"]}"}}]',),
                        ).fetchone()
                    )
                    and row[2] != "running"
                    and row
                ),
                10,
                "the reconciliation run to finish",
            )
            assert run == ("schedule", "scheduler", "succeeded")
            job = wait_for(
                lambda: conn.execute(
                    "SELECT ok, summary FROM job_runs WHERE job = 'reconcile' ORDER BY id DESC LIMIT 1"
                ).fetchone(),
                10,
                "the job_runs row",
            )
            conn.commit()
            assert job[0] is True and job[1]["status"] == "succeeded"
        assert '"actor_name": "reconcile"' in log.read_text()  # the log-context middleware bound it

        # Redis goes away: the scheduler's enqueue is logged and counted, never raised.
        private_redis.stop()
        before = JOB_EVENTS.labels("reconcile", "enqueue_failed")._value.get()
        enqueuer(actors)("reconcile")
        assert JOB_EVENTS.labels("reconcile", "enqueue_failed")._value.get() == before + 1
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
        forget_broker(redis_settings)


def test_the_hold_calls_pass_with_redis_unreachable(settings: Any, sa_url: str, currency: str) -> None:
    from ledger.app import create_app

    dead = replace(settings, redis_url=DEAD_REDIS)
    with TestClient(create_app(dead, sa_url)) as client:
        account_id = open_account(client, "1", currency=currency)
        settled = reserve(client, account_id, ttl=60)
        checkpoint(client, settled["id"])
        r = client.post(f"/v1/holds/{settled['id']}/settle", json={"usage": SMALL}, headers=auth(GATEWAY))
        assert r.status_code == 200 and r.json()["charge"]["amount"] == SMALL_CHARGE, r.text
        released = reserve(client, account_id, ttl=60)
        r = client.post(f"/v1/holds/{released['id']}/release", headers=auth(GATEWAY))
        assert r.status_code == 200 and r.json()["state"] == "released", r.text
        interrupted = client.post(
            "/v1/holds",
            json={"account_id": account_id, "idempotency_key": new_id(), "model": MODEL},
            headers=auth(GATEWAY),
        ).json()
        r = client.post(f"/v1/holds/{interrupted['id']}/interrupt", headers=auth(GATEWAY))
        assert r.status_code == 200, r.text
        r = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY))
        assert (r.json()["balance"], r.json()["held"]) == ("0.9993", "0.007")
        # Reconciliation and the ops surface need no Redis either.
        assert client.post("/admin/v1/reconciliation/runs", headers=auth(ADMIN)).status_code == 201
        assert client.get("/readyz").status_code == 200
        assert client.get("/metrics").status_code == 200


def test_the_http_service_never_imports_the_broker() -> None:
    """Nothing the API loads (holds, accounts, reconciliation ...) imports workers, Dramatiq or Redis."""
    code = (
        "import sys, ledger.app, ledger.holds.service, ledger.accounts.service;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('workers', 'dramatiq', 'redis')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
