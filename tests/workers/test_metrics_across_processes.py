"""Ledger-level metrics read the same from any process: a `ledger worker` process reconciles,
and the API's GET /metrics (this test process) shows it, read from the database."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from litestar.testing import TestClient

from tests.workers.conftest import (
    LEDGER,
    REPO,
    RESERVED,
    SMALL_CHARGE,
    PrivateRedis,
    checkpoint,
    child_env,
    get_hold,
    reserve,
    wait_until_expired,
)


def sample(text: str, name: str, **labels: str) -> Decimal | None:
    """The exact value of one sample in the exposition text (None when absent)."""
    for line in text.splitlines():
        match = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if found == labels:
            return Decimal(match.group(3))
    return None


def scrape(client: TestClient[Any]) -> str:
    time.sleep(1.1)  # past LEDGER_METRICS_CACHE_SECONDS (1): this scrape reads the database
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    return r.text


def test_a_worker_processes_reconciliation_shows_in_the_apis_metrics(
    client: TestClient[Any],
    account: str,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    private_redis: PrivateRedis,
    tmp_path: Path,
) -> None:
    from workers.actors import JobContext, register_actors
    from workers.broker import forget_broker, setup_broker

    before = scrape(client)
    revenue_before = sample(before, "ledger_revenue_total", currency=currency)
    settled_before = sample(before, "ledger_reconciled_holds_total", currency=currency, action="settled")
    released_before = sample(before, "ledger_reconciled_holds_total", currency=currency, action="released")
    charged_before = sample(before, "ledger_reconciled_amount_total", currency=currency, action="charged")
    returned_before = sample(before, "ledger_reconciled_amount_total", currency=currency, action="released")

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
        charged = checkpoint(client, reserve(client, account, ttl=1)["id"])
        released = reserve(client, account, ttl=1)
        wait_until_expired(charged, released)
        actors = register_actors(setup_broker(redis_settings), JobContext(redis_settings, sa_url))
        with psycopg.connect(database, autocommit=True) as conn:
            sent_at = conn.execute("SELECT now()").fetchone()[0]  # other tests' runs may be left running
        actors["reconcile"].send()
        deadline = time.monotonic() + 60
        while {get_hold(client, charged["id"])["state"], get_hold(client, released["id"])["state"]} != {
            "settled",
            "released",
        }:
            assert time.monotonic() < deadline, f"the worker resolved nothing: {log.read_text()[-2000:]}"
            time.sleep(0.2)
        with psycopg.connect(database, autocommit=True) as conn:
            while conn.execute(
                "SELECT count(*) FROM reconciliation_runs WHERE status = 'running' AND started_at >= %s",
                (sent_at,),
            ).fetchone() != (0,):
                assert time.monotonic() < deadline, "the worker's run did not finish"
                time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
        forget_broker(redis_settings)
    assert get_hold(client, charged["id"])["resolved_by"] == "reconciler"

    after = scrape(client)
    zero = Decimal(0)
    holds = "ledger_reconciled_holds_total"
    amounts = "ledger_reconciled_amount_total"
    assert sample(after, holds, currency=currency, action="settled") == (settled_before or zero) + 1
    assert sample(after, holds, currency=currency, action="released") == (released_before or zero) + 1
    assert sample(after, amounts, currency=currency, action="charged") == (charged_before or zero) + Decimal(
        SMALL_CHARGE
    )
    assert sample(after, amounts, currency=currency, action="released") == (
        returned_before or zero
    ) + 2 * Decimal(RESERVED) - Decimal(SMALL_CHARGE)
    assert sample(after, "ledger_revenue_total", currency=currency) == (revenue_before or zero) + Decimal(
        SMALL_CHARGE
    )

    # Every ledger-level figure is what the database says, whichever process wrote it.
    with psycopg.connect(database) as conn:
        count = "SELECT {0}, count(*) FROM {1} GROUP BY {0}"
        journal = dict(conn.execute(count.format("kind", "journal_transactions")).fetchall())
        runs = dict(conn.execute(count.format("status", "reconciliation_runs")).fetchall())
        states = dict(
            conn.execute(
                "SELECT state, count(*) FROM holds WHERE state IN ('open', 'interrupted') GROUP BY state"
            ).fetchall()
        )
    for kind, n in journal.items():
        assert sample(after, "ledger_journal_transactions_total", kind=kind) == n, kind
    assert journal["settle"] >= 1 and journal["release"] >= 1
    assert sample(after, "ledger_reconciliation_runs_total", status="succeeded") == runs["succeeded"]
    for state in ("open", "interrupted"):
        assert sample(after, "ledger_holds", state=state) == states.get(state, 0), state
