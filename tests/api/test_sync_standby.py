"""Without a synchronous standby (the suite's single PostgreSQL has none): /readyz and /metrics
say so; LEDGER_REQUIRE_SYNC_STANDBY=1 refuses every write with 503 `database_degraded`.

The formation test (`tests/ha/test_failover.py`) shows the other side: 1 with a standby.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from ledger.settings import load_settings
from tests.conftest import ADMIN, FINANCE, GATEWAY, TEST_ENV, auth, new_id, reserve


def test_readyz_and_metrics_report_no_synchronous_standby(client: TestClient[Any]) -> None:
    ready = client.get("/readyz")
    assert ready.status_code == 200  # the default keeps serving
    replication = ready.json()["replication"]
    assert replication["sync_standby"] is False
    assert replication["required"] is False
    assert replication["synchronous_standby_names"] == ""
    assert replication["in_recovery"] is False
    assert "ledger_database_sync_standby 0.0" in client.get("/metrics").text


@pytest.fixture
def strict(database: str) -> Iterator[TestClient[Any]]:
    from ledger.app import create_app

    settings = load_settings(dict(TEST_ENV, LEDGER_DATABASE_URL=database, LEDGER_REQUIRE_SYNC_STANDBY="1"))
    assert settings.require_sync_standby
    with TestClient(create_app(settings, settings.database_url or "")) as strict_client:
        yield strict_client


def test_required_and_missing_refuses_every_write_and_serves_reads(
    strict: TestClient[Any], world: dict[str, Any]
) -> None:
    account = world["account"]
    before = strict.get(f"/v1/accounts/{account}/balance", headers=auth(GATEWAY))
    assert before.status_code == 200  # reads are served

    refusals = [
        reserve(strict, account, max_output_tokens=10),  # the fast lane
        strict.post(
            f"/admin/v1/accounts/{account}/deposits",
            json={"idempotency_key": new_id("dep"), "amount": "1"},
            headers=auth(FINANCE),
        ),
        strict.post("/admin/v1/accounts", json={"account_id": new_id()}, headers=auth(ADMIN)),
        strict.post("/admin/v1/reconciliation/runs", headers=auth(ADMIN)),
    ]
    for r in refusals:
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "database_degraded"
        assert r.json()["error"]["type"] == "service_unavailable"

    quote = strict.post(
        "/admin/v1/quotes",
        json={"model": "t-simple", "currency": world["currency"], "max_output_tokens": 10},
        headers=auth(FINANCE),
    )
    assert quote.status_code == 200, quote.text  # a quote moves nothing
    after = strict.get(f"/v1/accounts/{account}/balance", headers=auth(GATEWAY))
    assert after.json() == before.json()  # nothing moved

    ready = strict.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["error"]["code"] == "database_degraded"
    assert ready.json()["replication"]["required"] is True


@pytest.mark.parametrize(("required", "level"), [(False, "info"), (True, "warning")])
def test_a_single_node_is_stated_at_info_unless_a_standby_is_required(
    database: str, required: bool, level: str
) -> None:
    """`make run` (one embedded node, no standby configured) must not start with a warning;
    with LEDGER_REQUIRE_SYNC_STANDBY=1 the same state refuses writes, so it warns."""
    import asyncio

    from structlog.testing import capture_logs

    from ledger.db import make_engine
    from ledger.replication import ReplicationWatch

    async def first_read() -> bool:
        engine = make_engine(database)
        try:
            return await ReplicationWatch(engine, required=required).refresh()
        finally:
            await engine.dispose()

    with capture_logs() as logs:
        assert asyncio.run(first_read()) is False
    events = [entry for entry in logs if entry["event"] == "database.sync_standby"]
    assert [entry["log_level"] for entry in events] == [level]
