"""The client tests' ledger, run as its own process with the project's interpreter.

`python -m tests.client.server` (from the repository root, in the project's venv) creates and
migrates a fresh database, starts a real `ledger serve` on it (tests/serving.py) and publishes
the contract's example prices (`replace`: two models, fewer than the bundled sheets). It then
prints one JSON line on stdout: `url`, `version` (the published price version), the
`gateway` and `finance` tokens and `document` (the price document it published, so a test
can publish a variant without importing `pricing`). It runs until its stdin closes, then
stops the server, drops the database and exits 1 if the server logged a traceback.

Why a process of its own: the client tests' process imports only the client, httpx, pytest
and the SDKs, so the same tests can run in a virtual environment where only the client's
wheel is installed (tests/client/test_client_wheel.py). The scheduled reconcile is pushed
out to once a year: the tests run reconciliation when they mean to.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import httpx

from ledger.db import migrate
from ledger.settings import normalize_database_url
from pricing.examples import contract_price_document
from tests import pg
from tests.conftest import FINANCE, GATEWAY, TEST_ENV, auth
from tests.serving import Server


def main() -> int:
    admin = pg.admin_url()
    name, database = pg.create_database(admin)
    env = {
        **TEST_ENV,
        "LEDGER_DATABASE_URL": database,
        "LEDGER_RECONCILE_CRON": "0 0 1 1 *",
        "LEDGER_LOG_LEVEL": "warning",
    }
    log = Path(tempfile.mkdtemp(prefix="client-server-")) / "server.log"
    try:
        migrate(normalize_database_url(database))
        with Server(env, log, drop=("LEDGER_REDIS_URL",), stop_timeout=10) as serve:
            serve.wait_ready(30)
            document = {k: v for k, v in contract_price_document().items() if k != "effective_at"}
            published = httpx.post(
                serve.base + "/admin/v1/price-versions",
                json={**document, "replace": True},
                headers=auth(FINANCE),
                timeout=30,
            )
            published.raise_for_status()
            ready = {
                "url": serve.base,
                "version": published.json()["version"],
                "gateway": GATEWAY,
                "finance": FINANCE,
                "document": document,
            }
            print(json.dumps(ready), flush=True)
            sys.stdin.read()  # until the tests close it (or exit)
        serve.assert_no_tracebacks()
    except AssertionError as error:
        print(f"client test server: {error}", file=sys.stderr)
        return 1
    finally:
        pg.drop_database(admin, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
