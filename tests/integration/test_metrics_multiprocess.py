"""GET /metrics with `ledger serve --workers 2` on the shared PostgreSQL.

Whichever process answers a scrape, the request counter sums to the requests
made; `ledger_integrity_ok` is absent until an integrity check has been recorded;
job runs recorded by a job runner elsewhere (here: this test process, as a
`ledger worker` would) are exported once; the standard process metrics cover
each live worker (a `pid` label).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ledger.settings import load_settings, normalize_database_url
from tests import pg
from tests.conftest import TEST_ENV
from tests.serving import Server

REQUESTS = 40


def scrape(base: str) -> dict[str, list[Any]]:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def healthz_count(families: dict[str, list[Any]]) -> float:
    return sum(
        s.value
        for s in families["ledger_http_requests"]
        if s.name == "ledger_http_requests_total" and s.labels["route"] == "/healthz"
    )


@pytest.fixture
def fresh_database(pg_admin_url: str) -> Iterator[str]:
    """A database of its own: no integrity check has ever been recorded in it."""
    from ledger.db import migrate

    name, url = pg.create_database(pg_admin_url)
    migrate(normalize_database_url(url))
    yield url
    pg.drop_database(pg_admin_url, name)


def test_two_workers_export_one_consistent_set_of_metrics(fresh_database: str, tmp_path: Path) -> None:
    env = {**TEST_ENV, "LEDGER_DATABASE_URL": fresh_database}
    with Server(env, tmp_path / "serve.log", "--workers", "2") as server:
        server.wait_ready()
        before = healthz_count(scrape(server.base))  # readiness polling made none on /healthz
        assert before == 0
        for _ in range(REQUESTS):
            assert httpx.get(f"{server.base}/healthz").status_code == 200  # a new connection each
        for _ in range(8):
            families = scrape(server.base)
            assert healthz_count(families) == REQUESTS
            assert "ledger_integrity_ok" not in families
        pids = {s.labels["pid"] for s in families["process_resident_memory_bytes"]}
        assert len(pids) == 2, pids

        # A job runner elsewhere records an integrity check: every worker now exports it.
        from workers.actors import JobContext, check_integrity
        from workers.runtime import shutdown

        settings = load_settings({**env, "LEDGER_REDIS_URL": "redis://127.0.0.1:6379/15"})
        try:
            assert check_integrity(JobContext(settings, normalize_database_url(fresh_database)))["ok"]
        finally:
            shutdown()
        for _ in range(4):
            families = scrape(server.base)
            assert [s.value for s in families["ledger_integrity_ok"]] == [1.0]
            runs = {
                (s.labels["job"], s.labels["outcome"]): s.value
                for s in families["ledger_job_runs"]
                if s.name == "ledger_job_runs_total"
            }
            assert runs == {("check_integrity", "ok"): 1.0}
            assert [s.labels["job"] for s in families["ledger_job_duration_seconds"]] == ["check_integrity"]
        assert "Traceback" not in server.log()
