"""One log format per process: a real `ledger worker`'s output is JSON from its first line
(Dramatiq's own lines included), and a background pass that found nothing logs nothing at info."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.workers.conftest import LEDGER, REPO, PrivateRedis, child_env


def lines_of(log: Path) -> list[dict[str, Any]]:
    """Every line of the log as JSON (a line that is not JSON fails here, named)."""
    parsed = []
    for number, line in enumerate(log.read_text().splitlines(), 1):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"line {number} of the worker's output is not JSON: {line!r}") from None
    return parsed


def finished(entries: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("event") == "job.finished" and e.get("job") == job]


def test_worker_output_is_json_and_empty_passes_log_at_debug(
    database: str, sa_url: str, settings: Any, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    from workers.actors import JobContext, register_actors
    from workers.broker import forget_broker, setup_broker

    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [LEDGER, "worker", "--processes", "1", "--threads", "2"],
        env=child_env(
            LEDGER_DATABASE_URL=database,
            LEDGER_REDIS_URL=private_redis.url,
            LEDGER_RECONCILE_GRACE_SECONDS="86400",  # nothing is eligible: the pass is empty
            LEDGER_GATEWAY_TOKENS="unused",
            LEDGER_LOG_FORMAT="json",
            LEDGER_LOG_LEVEL="debug",  # so the empty passes' debug lines can be seen
        ),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    redis_settings = replace(settings, redis_url=private_redis.url)
    jobs = ("reconcile", "deliver_alerts", "expire_grants")
    try:
        actors = register_actors(setup_broker(redis_settings), JobContext(redis_settings, sa_url))
        for job in jobs:
            actors[job].send()
        deadline = time.monotonic() + 60
        while not all(finished(lines_of(log), job) for job in jobs):
            assert time.monotonic() < deadline, f"the jobs did not finish: {log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
        forget_broker(redis_settings)

    entries = lines_of(log)  # every line, the last ones of the shutdown included
    assert entries[0]["logger"] == "dramatiq.MainProcess" and "booting up" in entries[0]["event"]
    assert any(e.get("logger", "").startswith("dramatiq.WorkerProcess") for e in entries)
    assert all({"event", "level", "timestamp"} <= e.keys() for e in entries)

    (reconcile,) = finished(entries, "reconcile")
    assert reconcile["level"] == "debug"
    assert reconcile["summary"]["settled"] == reconcile["summary"]["released"] == 0
    (deliver,) = finished(entries, "deliver_alerts")
    assert deliver["level"] == "debug" and deliver["summary"]["idle"] is True
    (expire,) = finished(entries, "expire_grants")
    busy = bool(expire["summary"]["expired"] or expire["summary"]["skipped"])
    assert expire["level"] == ("info" if busy else "debug")
    # Nothing else a job logged reached info while it found nothing to do.
    job_lines = [e for e in entries if e.get("actor_name") in ("reconcile", "deliver_alerts")]
    assert job_lines and all(e["level"] == "debug" for e in job_lines), [
        (e["level"], e["event"]) for e in job_lines if e["level"] != "debug"
    ]
