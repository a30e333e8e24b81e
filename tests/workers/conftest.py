"""Fixtures of the worker tests: a priced currency, hold helpers, one reconciliation pass, Redis.

Reconciliation runs are global: a pass resolves every eligible hold of the test
database, including other tests'. So these tests assert on their own holds (their
states, and that a run's items include them), never on a run's total counts.

Redis: a private, throwaway `redis-server` on a free port (so a test may stop it);
without the binary, the machine's 127.0.0.1:6379 on db 15. When no Redis can be had
the Redis tests skip, except on CI (`CI` set), where they fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, auth, fresh_currency, new_id, publish, simple_document

MODEL = "t-simple"  # input 2, output 10 per 1M tokens; max 1000 in, 500 out
RESERVED = "0.007"  # 1000 * 2 / 1e6 + 500 * 10 / 1e6
SMALL = {"prompt_tokens": 100, "completion_tokens": 50}  # 0.0002 + 0.0005
SMALL_CHARGE = "0.0007"
REPO = Path(__file__).resolve().parents[2]
LEDGER = str(REPO / ".venv" / "bin" / "ledger")


@pytest.fixture(scope="session")
def currency(client: TestClient[Any]) -> str:
    """A currency of its own with the simple test sheet, so exact amounts are easy to state."""
    code = fresh_currency()
    publish(client, simple_document(code))
    return code


@pytest.fixture
def account(make_account: Any, currency: str) -> str:
    account_id: str = make_account("1", currency=currency)
    return account_id


def reserve(client: TestClient[Any], account_id: str, *, ttl: int = 1) -> dict[str, Any]:
    body = {"account_id": account_id, "idempotency_key": new_id("key"), "model": MODEL, "ttl_seconds": ttl}
    r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert r.status_code == 201, r.text
    hold: dict[str, Any] = r.json()
    assert hold["amount"] == RESERVED
    return hold


def checkpoint(client: TestClient[Any], hold_id: str, usage: dict[str, Any] = SMALL) -> dict[str, Any]:
    r = client.post(f"/v1/holds/{hold_id}/usage", json={"usage": usage}, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    hold: dict[str, Any] = r.json()
    return hold


def interrupt(client: TestClient[Any], hold_id: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"usage": usage} if usage is not None else None
    r = client.post(f"/v1/holds/{hold_id}/interrupt", json=body, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    hold: dict[str, Any] = r.json()
    assert hold["state"] == "interrupted"
    return hold


def get_hold(client: TestClient[Any], hold_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/holds/{hold_id}", headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    hold: dict[str, Any] = r.json()
    return hold


def balance(client: TestClient[Any], account_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def wait_until_expired(*holds: dict[str, Any], extra: float = 0.3) -> None:
    """Sleep until every hold's expires_at has passed (same machine, same clock as the database)."""
    latest = max(datetime.fromisoformat(h["expires_at"].replace("Z", "+00:00")).timestamp() for h in holds)
    time.sleep(max(0.0, latest - time.time() + extra))


def api_run(client: TestClient[Any]) -> dict[str, Any]:
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))
    assert r.status_code == 201, r.text
    summary: dict[str, Any] = r.json()
    return summary


def item_of(summary: dict[str, Any], hold_id: str) -> dict[str, Any] | None:
    return next((i for i in summary["items"] if i["hold_id"] == hold_id), None)


async def _run_pass(
    sa_url: str, settings: Any, on_resolved: Any = None, trigger: str = "cli"
) -> dict[str, Any]:
    from ledger.context import CLI
    from ledger.db import make_engine
    from ledger.holds.service import HoldService
    from ledger.prices.service import PriceService
    from ledger.reconciliation.service import ReconciliationService

    engine = make_engine(sa_url, pool_size=2, max_overflow=2)
    try:
        holds = HoldService(engine, PriceService(engine), settings)
        service = ReconciliationService(engine, holds, settings, on_resolved=on_resolved)
        return await service.run_once(trigger, CLI)
    finally:
        await engine.dispose()


def run_pass(sa_url: str, settings: Any, **changes: Any) -> dict[str, Any]:
    """One pass on a fresh engine of its own, with the session settings changed as given."""
    return asyncio.run(_run_pass(sa_url, replace(settings, **changes) if changes else settings))


def settle_txns(database: str, hold_ids: list[str]) -> dict[str, list[str]]:
    """Journal transaction kinds per hold."""
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT hold_id::text, kind FROM journal_transactions "
            "WHERE hold_id = ANY(%s::uuid[]) ORDER BY id",
            (hold_ids,),
        ).fetchall()
    kinds: dict[str, list[str]] = {h: [] for h in hold_ids}
    for hold_id, kind in rows:
        kinds[hold_id].append(kind)
    return kinds


def child_env(**values: str) -> dict[str, str]:
    """The environment for a `ledger` subprocess: no inherited LEDGER_*, only what is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env.update(values)
    return env


# --- Redis ---------------------------------------------------------------------------------------


def _redis_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def no_redis(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Redis is required on CI: {why}")
    pytest.skip(why)


class PrivateRedis:
    def __init__(self, url: str, process: subprocess.Popen[bytes] | None) -> None:
        self.url = url
        self.process = process

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        if not _redis_answers("127.0.0.1", 6379):
            no_redis("no redis-server binary and nothing answers on 127.0.0.1:6379")
        yield PrivateRedis("redis://127.0.0.1:6379/15", None)
        return
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not _redis_answers("127.0.0.1", port):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            no_redis(f"redis-server did not start on port {port}")
        time.sleep(0.05)
    redis = PrivateRedis(f"redis://127.0.0.1:{port}/0", process)
    try:
        yield redis
    finally:
        redis.stop()
