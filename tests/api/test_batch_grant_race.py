"""A grant that commits while a batched settle waits for its account's lock still pays first.

The batch locks its accounts in one statement whose snapshot predates the wait, so a
grant committed during the wait is invisible to that statement. Whether a live grant
pays a settle is therefore read after the locks (with the holds): the settle takes the
locked path and the new grant pays before paid money, as the contract says.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import psycopg
from litestar.testing import TestClient

from tests.api.test_grants_api import balance, grants_of
from tests.conftest import GATEWAY, assert_integrity, auth, fresh_currency, new_id, publish, simple_document
from tests.integration.test_grant_invariants import entry, post


def waiting_for_a_lock(database: str, deadline: float) -> None:
    with psycopg.connect(database, autocommit=True) as watch:
        while time.monotonic() < deadline:
            row = watch.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.01)
    raise AssertionError("the settle never waited for the account's lock")


def test_a_grant_committed_while_the_settle_waits_for_the_lock_pays_first(
    client: TestClient[Any], make_account: Any, database: str
) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account_id = make_account("1", currency=currency)
    body = {
        "account_id": account_id,
        "idempotency_key": new_id("r"),
        "model": "t-simple",
        "max_output_tokens": 100,
    }
    hold = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert hold.status_code == 201, hold.text
    grant_id = "7d0e2a9c-1b7d-4e5a-9c3b-000000000001"
    with psycopg.connect(database) as granting, ThreadPoolExecutor(1) as pool:
        # A grant transaction that holds the account's lock (as the service's does) ...
        granting.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (account_id,))
        granting.execute(
            "INSERT INTO grants (id, account_id, currency, amount, priority, expires_at, idempotency_key, "
            "request_hash, reason, created_by) VALUES (%s, %s, %s, 5, 0, now() + interval '1 hour', %s, 'h', "
            "'race', 'test')",
            (grant_id, account_id, currency, new_id("k")),
        )
        txn = post(granting, "grant", account_id)
        entry(granting, txn, f"system:grants:{currency}", "main", "-5", currency)
        entry(granting, txn, account_id, f"grant:{grant_id}", "5", currency)
        # ... while the gateway's settle is batched and waits for that lock ...
        settling = pool.submit(
            client.post,
            f"/v1/holds/{hold.json()['id']}/settle",
            json={"usage": {"prompt_tokens": 500, "completion_tokens": 0}},
            headers=auth(GATEWAY),
        )
        waiting_for_a_lock(database, time.monotonic() + 10)
        granting.commit()  # ... commits before the settle gets the lock
        settled = settling.result(timeout=30)
    assert settled.status_code == 200, settled.text
    charged = Decimal(settled.json()["charge"]["amount"])
    assert charged > 0
    assert Decimal(grants_of(client, account_id)[grant_id]["remaining"]) == 5 - charged  # the grant paid
    assert balance(client, account_id)["paid"] == "1"  # paid money did not
    assert_integrity(client)
