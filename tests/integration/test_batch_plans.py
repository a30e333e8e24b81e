"""The group commit's plans stay bounded by the batch, however the tables grow (migration 0017).

`ledger_hold_batch` runs with `plan_cache_mode = force_generic_plan`: each of its
statements, and of the triggers they fire, is planned once per connection and kept. A
plan made while the tables are empty must still be right when they hold millions of
rows, so on a new database (empty holds, grants and journal) this test makes the
function plan every statement it has (reserves, a key replay, an unknown account,
settles and releases, with and without a budget key), reads each plan through auto_explain, and refuses any
plan that reads one of the big tables other than through an index condition: a
sequential scan, or an index scanned whole with the batch's keys only as a filter.

The same goes for the checks that run at the batch's commit (deferred triggers: the
balanced transaction, the hold-journal ties, the balance-alert crossing; migration
0019): they run outside the function, so without its settings, on the same
long-lived connection, and a plan one of them made while journal_transactions was
small walked the whole table at every commit once it had grown (seen with 50
accounts: 0.8 ms per hold at 14,000 journal transactions, growing with them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from ledger.db import migrate
from ledger.ids import uuid7
from ledger.settings import load_settings, normalize_database_url
from tests import pg
from tests.conftest import TEST_ENV, new_id, open_account, publish, simple_document

BIG = {"accounts", "account_alerts", "holds", "grants", "journal_transactions", "journal_entries", "budgets"}
# What runs at the batch's commit: its plans are read too (their context names the trigger function).
AT_COMMIT = ("ledger_check_transaction_balanced", "ledger_hold_journal_check", "ledger_alert_crossing")
CALL = "SELECT b.op_index, b.op_outcome, (b.op_hold).id FROM ledger_hold_batch(CAST(%s AS jsonb)) AS b"


@pytest.fixture
def empty(pg_admin_url: str) -> Iterator[str]:
    """A new, migrated database whose holds, grants and journal are empty."""
    name, url = pg.create_database(pg_admin_url)
    try:
        migrate(normalize_database_url(url))
        yield url
    finally:
        pg.drop_database(pg_admin_url, name)


def reserve(
    account: str, version: str, *, key: str | None = None, budget: str | None = None
) -> dict[str, Any]:
    return {
        "op": "reserve", "id": str(uuid7()), "account_id": account, "key": key or new_id("k"),
        "request_hash": "h", "model": "t-simple", "price_version": version, "currency": "USD",
        "amount": "1", "reservation": {"amount": "1"}, "ttl": 60, "metadata": {},
        "pinned": False, "actor": "gateway:test", "budget_key": budget,
    }  # fmt: skip


def settle(hold: str) -> dict[str, Any]:
    return {
        "op": "settle", "id": hold, "held": "1", "charged": "0.5",
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}, "charge": {"amount": "0.5"},
        "flagged": False, "review_reason": None, "actor": "gateway:test", "revenue": "system:revenue:USD:00",
    }  # fmt: skip


def scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from scans(child)


def unbounded(plan: dict[str, Any]) -> list[str]:
    """The plan's reads of a big table that no index condition bounds."""
    found = []
    for node in scans(plan["Plan"]):
        kind, table = node["Node Type"], node.get("Relation Name")
        if table in BIG and kind == "Seq Scan":
            found.append(f"Seq Scan on {table}")
        if table in BIG and kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in node:
            found.append(f"{kind} of {node['Index Name']} on {table} without an index condition")
        if kind == "Bitmap Index Scan" and "Index Cond" not in node:
            found.append(f"Bitmap Index Scan of {node['Index Name']} without an index condition")
    return found


def test_every_plan_of_the_batch_probes_an_index_by_the_batch_s_keys(empty: str) -> None:
    settings = load_settings(dict(TEST_ENV, LEDGER_DATABASE_URL=empty))
    from ledger.app import create_app

    with TestClient(create_app(settings, normalize_database_url(empty))) as client:
        version = publish(client, simple_document("USD"))
        plain, other = open_account(client, "10"), open_account(client, "10")

    plans: list[tuple[str, dict[str, Any]]] = []
    contexts: list[str] = []  # each plan's whole context: the functions the batch called too

    def collect(diag: psycopg.errors.Diagnostic) -> None:
        message, context = diag.message_primary or "", diag.context or ""
        if "plan:" in message and any(name in context for name in ("ledger_hold_batch", *AT_COMMIT)):
            lines = context.splitlines()  # the statement, ..., the function that ran it
            plans.append((f"{lines[0]} | {lines[-1]}", json.loads(message.split("plan:", 1)[1])))
            contexts.append(context)

    with psycopg.connect(empty, autocommit=True) as conn:
        # Statistics of the empty tables, as autovacuum (or a VACUUM after loading) leaves them:
        # with them a plan may take an index scanned whole for as cheap as a probe.
        conn.execute("VACUUM ANALYZE")
        proconfig = conn.execute(
            "SELECT proconfig FROM pg_proc WHERE proname = 'ledger_hold_batch'"
        ).fetchone()
        assert proconfig is not None and "plan_cache_mode=force_generic_plan" in proconfig[0]
        conn.add_notice_handler(collect)
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_format = json",
            "SET client_min_messages = log",
        ):
            conn.execute(setting)

        def batch(*ops: dict[str, Any]) -> list[Any]:
            return sorted(conn.execute(CALL, (json.dumps(list(ops)),)).fetchall())  # in op order

        key = new_id("k")
        made = batch(
            reserve(plain, version, key=key),
            reserve(other, version, budget="proj"),  # its budget row is made on first use
            reserve("nobody", version),
        )
        assert [row[1] for row in made] == ["created", "created", "no_account"]
        budgeted = batch(reserve(other, version, budget="proj"))  # the row exists now
        assert [row[1] for row in budgeted] == ["created"]
        replay = batch(reserve(plain, version, key=key), reserve(plain, version))
        assert [row[1] for row in replay] == ["exists", "created"]
        done = batch(
            settle(str(made[0][2])),
            settle(str(made[1][2])),  # budgeted: moves its budget
            {**settle(str(replay[1][2])), "op": "release"},
            {**settle(str(budgeted[0][2])), "op": "release"},  # budgeted
        )
        assert [row[1] for row in done] == ["settled", "settled", "released", "released"]

    statements = {text for text, _ in plans}
    assert len(statements) >= 10, statements  # the function's own statements and its triggers'
    budgeted = ("ledger_budget_hold", "ledger_budget_move")
    assert all(any(name in context for context in contexts) for name in budgeted), contexts
    planned = {name for name in AT_COMMIT if any(name in text for text in statements)}
    assert planned == set(AT_COMMIT), statements  # each check at commit made its plans too
    bad = {text: found for text, plan in plans if (found := unbounded(plan))}
    assert not bad, bad
