"""A real `ledger serve` for the client's tests, on a free port, against its own fresh database.

The database is created and migrated here (not shared with the in-process API tests), so a
reconciliation run the tests start resolves only holds these tests made. The scheduled
reconcile is pushed out to once a year: the tests run reconciliation when they mean to.
Prices: the contract's example document, published through the admin API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ledger.settings import normalize_database_url
from pricing.examples import contract_price_document
from tests import pg
from tests.conftest import FINANCE, TEST_ENV, auth, new_id
from tests.serving import Server


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
    env = {
        **TEST_ENV,
        "LEDGER_DATABASE_URL": database,
        "LEDGER_RECONCILE_CRON": "0 0 1 1 *",
        "LEDGER_LOG_LEVEL": "warning",
    }
    log = tmp_path_factory.mktemp("client-server") / "server.log"
    try:
        with Server(env, log, drop=("LEDGER_REDIS_URL",), stop_timeout=10) as serve:
            serve.wait_ready(30)
            # replace: the contract example prices two models, fewer than the bundled sheets.
            document = {k: v for k, v in contract_price_document().items() if k != "effective_at"}
            document["replace"] = True
            version = Ledger(serve.base, "").admin("POST", "/admin/v1/price-versions", document)["version"]
            yield Ledger(serve.base, version)
    finally:
        pg.drop_database(pg_admin_url, name)
    serve.assert_no_tracebacks()
