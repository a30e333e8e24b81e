"""Time the batch function `ledger_hold_batch` by itself: one account, no HTTP, no contention.

Run: ``.venv/bin/python bench/bench_batch_function.py [--rounds 200] [--ops 8] [--budget-key KEY]``.
To time another revision's function with the same script, put its checkout first on the path:
``PYTHONPATH=/path/to/checkout .venv/bin/python bench/bench_batch_function.py`` (its migrations
and code then make the database). Not part of ``make test``; its numbers depend on the machine.

On a new database (migrated to head, one funded account, one price version) each round sends
one batch of ``--ops`` reserves, then one of settles (half of the holds) and one of releases
(the other half), each as one call, and waits for its commit. Prints the median wall time per
call of each kind, and the function's own time per call as PostgreSQL counted it
(``track_functions``: the function's statements, not the commit and its deferred checks).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.*, unless a PYTHONPATH checkout has them

from litestar.testing import TestClient

from ledger.db import migrate
from ledger.settings import load_settings, normalize_database_url
from tests import pg
from tests.conftest import TEST_ENV, open_account, publish, simple_document

CALL = "SELECT b.op_index, b.op_outcome, (b.op_hold).id FROM ledger_hold_batch(CAST(%s AS jsonb)) AS b"
WARMUP = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--ops", type=int, default=8, help="reserves per batch (default 8)")
    parser.add_argument("--budget-key", default=None, help="every reserve names this budget key")
    args = parser.parse_args()
    name, url = pg.create_database(args.server_url)
    try:
        print(json.dumps(measure(url, args.rounds, args.ops, args.budget_key)))
    finally:
        pg.drop_database(args.server_url, name)


def measure(url: str, rounds: int, ops: int, budget_key: str | None) -> dict[str, Any]:
    migrate(normalize_database_url(url))
    from ledger.app import create_app

    settings = load_settings(dict(TEST_ENV, LEDGER_DATABASE_URL=url))
    with TestClient(create_app(settings, normalize_database_url(url))) as client:
        version = publish(client, simple_document("USD"))
        account = open_account(client, "100000000")

    def reserve() -> dict[str, Any]:
        return {
            "op": "reserve", "id": str(uuid.uuid4()), "account_id": account, "key": uuid.uuid4().hex,
            "request_hash": "h", "model": "t-simple", "price_version": version, "currency": "USD",
            "amount": "1", "reservation": {"amount": "1", "n": 1}, "ttl": 60, "metadata": {},
            "pinned": False, "actor": "gateway:bench", "budget_key": budget_key,
        }  # fmt: skip

    def resolve(hold: Any, op: str) -> dict[str, Any]:
        return {
            "op": op, "id": str(hold), "held": "1", "charged": "0.5",
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}, "charge": {"amount": "0.5"},
            "flagged": False, "review_reason": None, "actor": "gateway:bench",
            "revenue": "system:revenue:USD:00",
        }  # fmt: skip

    times: dict[str, list[float]] = {"reserve": [], "settle": [], "release": []}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET track_functions = 'all'")
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        for i in range(rounds + WARMUP):
            took = {}
            started = time.perf_counter()
            rows = conn.execute(CALL, (json.dumps([reserve() for _ in range(ops)]),)).fetchall()
            took["reserve"] = time.perf_counter() - started
            assert all(row[1] == "created" for row in rows), rows
            holds = [row[2] for row in rows]
            for kind, part in (("settle", holds[: ops // 2]), ("release", holds[ops // 2 :])):
                started = time.perf_counter()
                done = conn.execute(CALL, (json.dumps([resolve(h, kind) for h in part]),)).fetchall()
                took[kind] = time.perf_counter() - started
                assert {row[1] for row in done} <= {f"{kind}d"}, done
            if i >= WARMUP:
                for kind, seconds in took.items():
                    times[kind].append(seconds)
    time.sleep(1.5)  # the backend's function statistics reach the shared counters
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT calls, total_time FROM pg_stat_user_functions WHERE funcname = 'ledger_hold_batch'"
        ).fetchone()
    assert row is not None and revision is not None
    return {
        "revision": revision[0],
        "ops": ops,
        "budget_key": budget_key,
        "median_ms": {kind: round(statistics.median(v) * 1e3, 3) for kind, v in times.items()},
        "function_ms_per_call": round(row[1] / row[0], 4),
    }


if __name__ == "__main__":
    main()
