"""The `ledger reconcile`, `worker`, `scheduler` and `health` commands, as real subprocesses."""

from __future__ import annotations

import json
import subprocess
from typing import Any

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
    item_of,
    reserve,
    wait_until_expired,
)


def ledger(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LEDGER, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=child_env(**env)
    )


def test_ledger_reconcile_prints_the_run_summary(
    client: TestClient[Any], account: str, database: str
) -> None:
    settled = checkpoint(client, reserve(client, account, ttl=1)["id"])
    released = reserve(client, account, ttl=1)
    wait_until_expired(settled, released)

    done = ledger(
        "reconcile",
        LEDGER_DATABASE_URL=database,
        LEDGER_RECONCILE_GRACE_SECONDS="0",
        LEDGER_LOG_LEVEL="warning",
    )

    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "succeeded" and summary["trigger"] == "cli" and summary["actor"] == "cli"
    assert summary["settled"] >= 1 and summary["released"] >= 1
    assert summary["settled"] + summary["released"] == len(summary["items"])
    assert item_of(summary, settled["id"])["charge"] == SMALL_CHARGE  # type: ignore[index]
    assert item_of(summary, released["id"])["released"] == RESERVED  # type: ignore[index]
    assert summary["finished_at"] is not None and isinstance(summary["charged_amount"], str)
    assert get_hold(client, settled["id"])["resolved_by"] == "reconciler"
    assert get_hold(client, released["id"])["state"] == "released"


def test_worker_and_scheduler_refuse_to_start_without_database_and_redis(database: str) -> None:
    for command in ("worker", "scheduler"):
        done = ledger(command, timeout=60)
        assert done.returncode == 2
        assert "LEDGER_DATABASE_URL and LEDGER_REDIS_URL must be set" in done.stderr
        done = ledger(command, timeout=60, LEDGER_DATABASE_URL=database)
        assert done.returncode == 2
        assert "LEDGER_REDIS_URL must be set" in done.stderr


def test_health_answers_for_worker_and_scheduler(database: str, private_redis: PrivateRedis) -> None:
    for role in ("--worker", "--scheduler"):
        done = ledger("health", role, LEDGER_DATABASE_URL=database, LEDGER_REDIS_URL=private_redis.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["ok"] is True
    done = ledger(
        "health", "--worker", LEDGER_DATABASE_URL=database, LEDGER_REDIS_URL="redis://127.0.0.1:1/0"
    )
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False and set(report["problems"]) == {"redis"}
    done = ledger(
        "health",
        "--scheduler",
        LEDGER_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        LEDGER_REDIS_URL=private_redis.url,
    )
    assert done.returncode == 1 and set(json.loads(done.stdout)["problems"]) == {"database"}


def test_ledger_expire_grants_prints_a_summary_and_expires_once(make_account: Any, database: str) -> None:
    import psycopg

    from tests.integration.test_grant_invariants import sql_grant

    account_id = make_account("1")
    with psycopg.connect(database) as conn:
        grant_id = sql_grant(conn, account_id, "0.25", expires="now() - interval '1 second'")
    done = ledger("expire-grants", LEDGER_DATABASE_URL=database, LEDGER_LOG_LEVEL="warning")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["expired"] >= 1 and set(summary) == {"expired", "skipped", "amounts"}
    again = ledger("expire-grants", LEDGER_DATABASE_URL=database, LEDGER_LOG_LEVEL="warning")
    assert again.returncode == 0, again.stderr
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT count(*) FROM journal_transactions WHERE kind = 'grant_expiry' AND reference = %s",
            (grant_id,),
        ).fetchone()
    assert row is not None and row[0] == 1
