"""Two reconcilers at once, and a reconciler SIGKILLed in the middle of a batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from litestar.testing import TestClient

from tests.conftest import assert_integrity
from tests.workers.conftest import (
    REPO,
    RESERVED,
    SMALL_CHARGE,
    balance,
    checkpoint,
    child_env,
    get_hold,
    reserve,
    run_pass,
    settle_txns,
    wait_until_expired,
)

SCRIPT = Path(__file__).with_name("reconcile_slow.py")


def many_holds(client: TestClient[Any], accounts: list[str], per_account: int) -> list[dict[str, Any]]:
    """`per_account` holds on each account, ttl 1 s; every second one has a checkpoint."""
    holds = []
    for n in range(per_account):
        for account_id in accounts:
            hold = reserve(client, account_id, ttl=1)
            if n % 2 == 0:
                hold = checkpoint(client, hold["id"])
            holds.append(hold)
    return holds


def expected_resolution(hold: dict[str, Any]) -> tuple[str, str | None]:
    return ("settled", SMALL_CHARGE) if hold["usage"] is not None else ("released", None)


def test_two_reconcilers_started_together_resolve_each_hold_once(
    client: TestClient[Any], make_account: Any, currency: str, database: str, sa_url: str, settings: Any
) -> None:
    accounts = [make_account("1", currency=currency) for _ in range(4)]
    holds = many_holds(client, accounts, 50)
    ids = [h["id"] for h in holds]
    assert len(set(ids)) == 200
    wait_until_expired(*holds)

    barrier = threading.Barrier(2)
    summaries: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def reconciler() -> None:
        try:
            barrier.wait(10)
            summaries.append(run_pass(sa_url, settings, reconcile_batch_size=10))
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=reconciler) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures
    assert len(summaries) == 2 and all(s["status"] == "succeeded" for s in summaries)

    mine = set(ids)
    resolved_by_run = [{i["hold_id"] for i in s["items"] if i["hold_id"] in mine} for s in summaries]
    assert not resolved_by_run[0] & resolved_by_run[1], "a hold was resolved by both runs"
    assert resolved_by_run[0] | resolved_by_run[1] == mine
    assert sum(len(r) for r in resolved_by_run) == 200
    # Exactly one settle or release journal transaction per hold.
    for hold_id, kinds in settle_txns(database, ids).items():
        assert kinds.count("reserve") == 1, (hold_id, kinds)
        assert len([k for k in kinds if k in ("settle", "release")]) == 1, (hold_id, kinds)
    by_id = {h["id"]: h for h in holds}
    for summary in summaries:
        for item in summary["items"]:
            if item["hold_id"] in mine:
                assert (item["action"], item["charge"]) == expected_resolution(by_id[item["hold_id"]])
    for account_id in accounts:
        money = balance(client, account_id)
        # 50 holds per account: 25 settled at 0.0007, 25 released.
        assert (money["balance"], money["held"]) == ("0.9825", "0"), money
    assert_integrity(client)


def test_a_reconciler_killed_mid_batch_leaves_nothing_half_done(
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    tmp_path: Path,
) -> None:
    accounts = [make_account("1", currency=currency) for _ in range(3)]
    holds = many_holds(client, accounts, 20)
    ids = [h["id"] for h in holds]
    by_id = {h["id"]: h for h in holds}
    wait_until_expired(*holds)

    app_name = f"ledger-kill-{uuid.uuid4().hex[:8]}"
    errors = tmp_path / "stderr.txt"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), database, "25", "0.05", app_name],
        stdout=subprocess.PIPE,
        stderr=errors.open("w"),
        text=True,
        cwd=REPO,
        env=child_env(PYTHONPATH=str(REPO)),
    )
    printed: list[str] = []
    assert process.stdout is not None
    try:
        assert process.stdout.readline().strip() == "started"
        while len(printed) < 35:  # the first batch (25) committed; the second is 10 holds in
            line = process.stdout.readline()
            assert line.startswith("resolved "), (line, errors.read_text())
            printed.append(line.split()[1])
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait(10)
    assert process.returncode == -signal.SIGKILL

    # The killed session's backend rolls back and goes away once it notices.
    with psycopg.connect(database, autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app_name,)
        ).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "the killed reconciler's session did not end"
            time.sleep(0.1)

    kinds = settle_txns(database, ids)
    resolved, untouched = [], []
    for hold_id in ids:
        hold = get_hold(client, hold_id)
        if hold["state"] == "open":
            untouched.append(hold_id)
            assert kinds[hold_id] == ["reserve"], (hold_id, kinds[hold_id])
            assert hold["resolved_by"] is None and hold["charge"] is None
        else:
            resolved.append(hold_id)
            action, charge = expected_resolution(by_id[hold_id])
            assert hold["state"] == action and hold["resolved_by"] == "reconciler"
            assert kinds[hold_id] == ["reserve", "settle" if action == "settled" else "release"]
            assert (hold["charge"] or {}).get("amount") == charge
    assert untouched, "the kill came too late: every hold was resolved"
    # The killed batch is everything printed after the first 25, whoever's hold it was: the
    # session-wide database can hold other tests' expired holds, which the pass resolves too.
    killed_batch = settle_txns(database, printed[25:])
    assert killed_batch and all(k == ["reserve"] for k in killed_batch.values()), (
        "a hold of the killed batch was committed",
        killed_batch,
    )
    assert all(h in untouched for h in printed[25:] if h in by_id)
    assert set(resolved) <= set(printed), "something not printed as resolved was committed"
    for account_id in accounts:
        open_here = [h for h in untouched if by_id[h]["account_id"] == account_id]
        charged_here = [h for h in resolved if by_id[h]["account_id"] == account_id and by_id[h]["usage"]]
        money = balance(client, account_id)
        assert Decimal(money["held"]) == Decimal(RESERVED) * len(open_here)
        assert Decimal(money["balance"]) == Decimal(1) - Decimal(SMALL_CHARGE) * len(charged_here)

    # The killed run's row agrees with what it committed, and says it never finished.
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT status, finished_at, settled_count + released_count, "
            "ARRAY(SELECT i->>'hold_id' FROM jsonb_array_elements(items) i) "
            "FROM reconciliation_runs WHERE trigger = 'cli' AND status = 'running' "
            "ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
    assert row is not None
    status, finished_at, count, run_items = row
    assert (status, finished_at, count) == ("running", None, len(run_items))
    assert {h for h in run_items if h in by_id} == set(resolved)

    # The next pass finishes the job.
    summary = run_pass(sa_url, settings)
    assert {i["hold_id"] for i in summary["items"]} >= set(untouched)
    for hold_id, hold_kinds in settle_txns(database, ids).items():
        assert len([k for k in hold_kinds if k in ("settle", "release")]) == 1, (hold_id, hold_kinds)
    for account_id in accounts:
        money = balance(client, account_id)
        assert (money["balance"], money["held"]) == ("0.993", "0")  # 10 of 20 settled at 0.0007
    assert_integrity(client)
