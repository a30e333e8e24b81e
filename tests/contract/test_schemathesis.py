"""The OpenAPI document against the running service: schemathesis, every check, both surfaces.

A real `ledger serve` process on a free port and a fresh database (migrated, seeded with
an account, a price version, an open hold, a budget and a reconciliation run, so the id
paths are reachable: each path id is the seeded one about half of the time, through a
schemathesis dictionary). schemathesis's own runner (`schemathesis run`, as a subprocess,
so its coverage, fuzzing and stateful phases all run) tests the gateway surface with a
gateway token and the admin surface with an admin token, `--checks all`: server errors,
status codes, media types, response bodies and headers, negative data rejected, positive
data accepted, missing required headers, unsupported methods (405 with Allow), ignored
auth, use after free, resource availability.

Three checks are narrowed, never dropped, in `tests/contract/hooks.py`, each by the exact
answers of a money API that a schema cannot predict, with the reason beside it (and 402,
not a 2xx, is the answer to a reservation the account cannot pay, 410 to one for a retired
model: configured below).
Runs are seeded (the same requests every run) and bounded: each surface within
`TIMEOUT_SECONDS`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.db import migrate
from ledger.settings import normalize_database_url
from pricing.examples import contract_price_document
from tests import pg
from tests.conftest import ADMIN, GATEWAY, TEST_ENV, auth, new_id
from tests.contract.hooks import NARROWED
from tests.serving import ROOT, Server

EXAMPLES = 15
# A hard cap per surface for a loaded CI machine; alone, the gateway takes about 6 s and the
# admin surface about 30 s.
TIMEOUT_SECONDS = 150
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# A schema-valid reservation the account cannot pay is 402 (the contract), not a 2xx; a
# reserve or quote for a model past the retires_at its price version gives is 410 (a
# document the run itself published may retire a model in the past).
POSITIVE_STATUSES = ["2xx", "3xx", "401", "402", "403", "404", "409", "410", "429", "5xx"]


@dataclass(frozen=True)
class Live:
    base: str
    ids: dict[str, str]  # path parameter -> a seeded id


def _seed(base: str) -> dict[str, str]:
    with httpx.Client(base_url=base, timeout=10) as http:

        def call(method: str, path: str, token: str, body: dict[str, Any] | None = None) -> Any:
            r = http.request(method, path, json=body, headers=auth(token))
            assert r.status_code in (200, 201), r.text
            return r.json()

        document = {**contract_price_document(), "replace": True}  # fewer models than the seed
        version = call("POST", "/admin/v1/price-versions", ADMIN, document)["version"]
        account = new_id()
        call("POST", "/admin/v1/accounts", ADMIN, {"account_id": account})
        call(
            "POST",
            f"/admin/v1/accounts/{account}/deposits",
            ADMIN,
            {"idempotency_key": "d", "amount": "1000"},
        )
        hold = call(
            "POST",
            "/v1/holds",
            GATEWAY,
            {"account_id": account, "idempotency_key": "h", "model": "gpt-6-luna", "max_output_tokens": 100},
        )["id"]
        run = call("POST", "/admin/v1/reconciliation/runs", ADMIN)["run_id"]
        budget = {"amount": "1", "period": "daily", "reason": "contract run"}
        call("PUT", f"/admin/v1/accounts/{account}/budgets/proj", ADMIN, budget)
    return {"account_id": account, "hold_id": hold, "version": version, "run_id": run, "budget_key": "proj"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    admin = pg.admin_url()
    name, url = pg.create_database(admin)
    migrate(normalize_database_url(url))
    env = {**TEST_ENV, "LEDGER_DATABASE_URL": url}
    log = tmp_path_factory.mktemp("contract") / "server.log"
    try:
        with Server(env, log, drop=("LEDGER_REDIS_URL",), stop_timeout=10) as serve:
            serve.wait_ready(30)
            yield Live(base=serve.base, ids=_seed(serve.base))
            serve.assert_no_tracebacks()
    finally:
        pg.drop_database(admin, name)


def config(live: Live) -> str:
    """schemathesis.toml: the seeded ids (half of the time) and the 402 of a money API.

    No cache: every run starts from the same seed alone, and writes nothing into the repository.
    """
    lines = [
        "[cache]",
        "enabled = false",
        "[checks.positive_data_acceptance]",
        f"expected-statuses = {POSITIVE_STATUSES!r}".replace("'", '"'),
    ]
    for name, value in live.ids.items():
        lines += [f"[dictionaries.{name}]", f'values = ["{value}"]']
    lines.append("[parameters]")
    for name in live.ids:
        lines.append(f'"path.{name}" = {{ dictionary = "{name}", probability = 0.5 }}')
    return "\n".join(lines) + "\n"


def run_schemathesis(live: Live, tmp_path: Path, token: str, paths: str) -> tuple[int, str, float]:
    toml = tmp_path / "schemathesis.toml"
    toml.write_text(config(live))
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(toml),
        "--no-color",
        "run",
        f"{live.base}/schema/openapi.json",
        "--checks",
        "all",
        "--exclude-checks",
        ",".join(NARROWED),
        "--header",
        f"Authorization: Bearer {token}",
        "--include-path-regex",
        paths,
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        "1",
        "--workers",
        "1",
        "--no-shrink",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.contract.hooks", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


@pytest.mark.parametrize(
    ("surface", "token", "paths", "operations"),
    [("gateway", GATEWAY, "^/v1/", 8), ("admin", ADMIN, "^/admin/v1/", 30)],
)
def test_every_check_passes(
    live: Live, tmp_path: Path, surface: str, token: str, paths: str, operations: int
) -> None:
    code, output, elapsed = run_schemathesis(live, tmp_path, token, paths)
    (tmp_path / "schemathesis.txt").write_text(output)
    summary = output[output.find("SUMMARY") :]
    print(f"schemathesis ({surface}): {elapsed:.1f} s\n{summary}")
    tested = re.search(r"Tested: (\d+)", output)
    assert tested is not None and int(tested.group(1)) >= operations, output[-3000:]
    assert "Failures:" not in output and code == 0, output[-20000:]
