"""A real `ledger serve` for the client's tests, on a free port, against its own fresh database.

This process imports only the client, httpx, pytest and the standard library (and the SDKs
the usage tests construct): the server and its database are set up by `tests/client/server.py`
in a process of its own, run with the project's interpreter (`LEDGER_SERVER_PYTHON`, else this
one). So these tests also run from a virtual environment that holds nothing but the client's
wheel (tests/client/test_client_wheel.py); there, `LEDGER_CLIENT_ALONE=1` makes the session
check at its end that nothing of the service was imported.

The database is not shared with the in-process API tests, so a reconciliation run the tests
start resolves only holds these tests made. Prices: the contract's example document.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the client's own process must never import (the service and its dependencies).
SERVICE_MODULES = frozenset(
    {"ledger", "pricing", "workers", "litestar", "sqlalchemy", "dramatiq", "pgserver", "psycopg", "msgspec"}
)


def new_id(prefix: str = "acct") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class Ledger:
    """The running service: its URL, the pinned price version, the gateway token, admin helpers."""

    def __init__(self, ready: dict[str, Any]) -> None:
        self.url: str = ready["url"]
        self.version: str = ready["version"]
        self.token: str = ready["gateway"]
        self.document: dict[str, Any] = ready["document"]
        self._finance: str = ready["finance"]

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {self._finance}"}
        r = httpx.request(method, self.url + path, json=body, headers=headers, timeout=30)
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
def ledger() -> Iterator[Ledger]:
    # tests.serving.server_python's rule, not imported: that module belongs to the service's side.
    python = os.environ.get("LEDGER_SERVER_PYTHON") or sys.executable
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [python, "-m", "tests.client.server"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            line = proc.stdout.readline()
            if not line:
                proc.wait(30)
                errors.seek(0)
                raise RuntimeError(f"the test server did not start: {errors.read().decode(errors='replace')}")
            yield Ledger(json.loads(line))
        finally:
            proc.stdin.close()
            status = proc.wait(60)
        errors.seek(0)
        assert status == 0, errors.read().decode(errors="replace")


@pytest.fixture(scope="session", autouse=True)
def _client_alone() -> Iterator[None]:
    """With `LEDGER_CLIENT_ALONE` set: the client comes from an installed wheel, and when the
    session ends nothing of the service has been imported into this process."""
    if os.environ.get("LEDGER_CLIENT_ALONE"):
        import ledger_client

        assert not Path(ledger_client.__file__).is_relative_to(ROOT), ledger_client.__file__
    yield
    if os.environ.get("LEDGER_CLIENT_ALONE"):
        imported = sorted(m for m in sys.modules if m.split(".")[0] in SERVICE_MODULES)
        assert not imported, f"the client's tests imported the service: {imported}"
