"""A real `ledger serve` for the client's tests, on a free port, against its own fresh database.

The database is created and migrated here (not shared with the in-process API tests), so a
reconciliation run the tests start resolves only holds these tests made. The scheduled
reconcile is pushed out to once a year: the tests run reconciliation when they mean to.
Prices: the contract's example document, published through the admin API.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.settings import normalize_database_url
from pricing.examples import contract_price_document
from tests import pg
from tests.conftest import FINANCE, TEST_ENV, auth, new_id

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Ledger:
    """The running service: its URL, the pinned price version, and admin helpers."""

    def __init__(self, url: str, version: str) -> None:
        self.url = url
        self.version = version

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        r = httpx.request(method, self.url + path, json=body, headers=auth(FINANCE), timeout=30)
        assert r.is_success, r.text
        return r.json()

    def account(self, deposit: str) -> str:
        account_id = new_id()
        self.admin("POST", "/admin/v1/accounts", {"account_id": account_id})
        self.admin(
            "POST",
            f"/admin/v1/accounts/{account_id}/deposits",
            {"idempotency_key": new_id("dep"), "amount": deposit},
        )
        return account_id

    def journal(self, account_id: str) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self.admin("GET", f"/admin/v1/accounts/{account_id}/transactions")[
            "data"
        ]
        return data

    def reconcile(self) -> dict[str, Any]:
        run: dict[str, Any] = self.admin("POST", "/admin/v1/reconciliation/runs")
        return run

    def integrity_ok(self) -> bool:
        return bool(self.admin("GET", "/admin/v1/integrity")["ok"])


@pytest.fixture(scope="module")
def ledger(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    from ledger.db import migrate

    name, database = pg.create_database(pg_admin_url)
    migrate(normalize_database_url(database))
    port = free_port()
    env = {
        **os.environ,
        **TEST_ENV,
        "LEDGER_DATABASE_URL": database,
        "LEDGER_RECONCILE_CRON": "0 0 1 1 *",
        "LEDGER_LOG_LEVEL": "warning",
    }
    env.pop("LEDGER_REDIS_URL", None)
    log = open(tmp_path_factory.mktemp("client-server") / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledger.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError("server did not become ready")
        # replace: the contract example prices two models, fewer than the bundled sheets.
        document = {k: v for k, v in contract_price_document().items() if k != "effective_at"}
        document["replace"] = True
        version = Ledger(url, "").admin("POST", "/admin/v1/price-versions", document)["version"]
        yield Ledger(url, version)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        pg.drop_database(pg_admin_url, name)
        lines = Path(log.name).read_text(errors="replace").splitlines()
        tracebacks = [line for line in lines if "Traceback" in line]
        assert not tracebacks, f"the server logged {len(tracebacks)} tracebacks; see {log.name}"
