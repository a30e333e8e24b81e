"""Grant books: what the database refuses whatever SQL is sent, and expiry that never runs twice."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from ledger.context import CLI
from ledger.db import make_engine
from ledger.grants.service import GrantService
from tests.conftest import FINANCE, assert_integrity, auth, fresh_currency, new_id, publish, simple_document

ENTRY = (
    "INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount) "
    "VALUES (%s, %s, 'USD', %s, %s)"
)


def refused(sql: psycopg.Connection[Any], statement: str, params: tuple[Any, ...] = ()) -> str:
    with pytest.raises(psycopg.Error) as caught:
        sql.execute(statement, params)
        sql.commit()
    sql.rollback()
    return str(caught.value)


def sql_grant(
    sql: psycopg.Connection[Any],
    account_id: str,
    amount: str,
    *,
    expires: str = "now() + interval '1 hour'",
    currency: str = "USD",
) -> str:
    """A grant written the way the service writes it (direct SQL may choose a past expiry)."""
    grant_id = str(uuid.uuid4())
    sql.execute(
        "INSERT INTO grants (id, account_id, currency, amount, priority, expires_at, idempotency_key, "
        f"request_hash, reason, created_by) VALUES (%s, %s, %s, %s, 0, {expires}, %s, 'h', 'sql', 'sql')",
        (grant_id, account_id, currency, amount, new_id("k")),
    )
    txn = post(sql, "grant", account_id)
    entry(sql, txn, f"system:grants:{currency}", "main", f"-{amount}", currency)
    entry(sql, txn, account_id, f"grant:{grant_id}", amount, currency)
    sql.commit()
    return grant_id


def post(sql: psycopg.Connection[Any], kind: str, account_id: str) -> int:
    row = sql.execute(
        "INSERT INTO journal_transactions (kind, account_id, actor) VALUES (%s, %s, 'sql') RETURNING id",
        (kind, account_id),
    ).fetchone()
    assert row is not None
    return int(row[0])


def entry(
    sql: psycopg.Connection[Any], txn: int, account_id: str, book: str, amount: str, currency: str = "USD"
) -> None:
    sql.execute(
        "INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount) "
        "VALUES (%s, %s, %s, %s, %s)",
        (txn, account_id, currency, book, amount),
    )


def remaining(sql: psycopg.Connection[Any], grant_id: str) -> Decimal:
    row = sql.execute("SELECT remaining FROM grants WHERE id = %s", (grant_id,)).fetchone()
    sql.rollback()
    assert row is not None
    value: Decimal = row[0]
    return value.normalize()


def test_direct_sql_cannot_overdraw_or_rewrite_a_grant_book(
    client: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    account_id = make_account("5")
    grant_id = sql_grant(sql, account_id, "2")
    book = f"grant:{grant_id}"
    # Overdraw: a settle-kind transaction taking 3 out of a book holding 2.
    txn = post(sql, "settle", account_id)
    entry(sql, txn, "system:revenue:USD:00", "main", "3")
    assert "grants_remaining_bounds" in refused(
        sql,
        "INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount) "
        "VALUES (%s, %s, 'USD', %s, -3)",
        (txn, account_id, book),
    )
    # Money into a grant book other than by its grant transaction; or out by a deposit or adjustment.
    for kind, amount in (("settle", "1"), ("adjustment", "-1"), ("deposit", "1"), ("release", "-1")):
        txn = post(sql, kind, account_id)
        message = refused(
            sql,
            "INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount) "
            "VALUES (%s, %s, 'USD', %s, %s)",
            (txn, account_id, book, amount),
        )
        assert "grant" in message, (kind, message)
    # A second grant transaction into the same book.
    txn = post(sql, "grant", account_id)
    assert "empty book" in refused(
        sql,
        ENTRY,
        (txn, account_id, book, 2),
    )
    # Expiring a grant that has not expired.
    txn = post(sql, "grant_expiry", account_id)
    assert "has not expired" in refused(
        sql,
        ENTRY,
        (txn, account_id, book, -2),
    )
    # Another account's book, a book of no grant, the grants counterpart on a deposit.
    other = make_account("1")
    txn = post(sql, "settle", other)
    assert "is not a grant of account" in refused(
        sql,
        ENTRY,
        (txn, other, book, -1),
    )
    txn = post(sql, "deposit", account_id)
    assert "takes grant and grant_expiry entries only" in refused(
        sql,
        "INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount) "
        "VALUES (%s, 'system:grants:USD', 'USD', 'main', -1)",
        (txn,),
    )
    # The cache on the grant row, and the row itself.
    assert "only through journal entries" in refused(
        sql, "UPDATE grants SET remaining = 100 WHERE id = %s", (grant_id,)
    )
    assert "only through journal entries" in refused(
        sql, "UPDATE grants SET expires_at = now() + interval '1 year' WHERE id = %s", (grant_id,)
    )
    assert "never deleted" in refused(sql, "DELETE FROM grants WHERE id = %s", (grant_id,))
    assert "append-only" in refused(sql, "TRUNCATE grants CASCADE")
    # A grant row that never got its money, or that starts with money.
    assert "has no grant journal entry" in refused(
        sql,
        "INSERT INTO grants (id, account_id, currency, amount, priority, expires_at, idempotency_key, "
        "request_hash, reason, created_by) "
        "VALUES (%s, %s, 'USD', 1, 0, now() + interval '1 day', 'x', 'h', 'r', 'sql')",
        (str(uuid.uuid4()), account_id),
    )
    assert "starts empty" in refused(
        sql,
        "INSERT INTO grants (id, account_id, currency, amount, remaining, priority, expires_at, "
        "idempotency_key, request_hash, reason, created_by) "
        "VALUES (%s, %s, 'USD', 1, 1, 0, now() + interval '1 day', 'y', 'h', 'r', 'sql')",
        (str(uuid.uuid4()), account_id),
    )
    assert remaining(sql, grant_id) == Decimal(2)
    assert_integrity(client)


def test_a_settle_posting_must_charge_the_whole_hold_across_the_accounts_books(
    client: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    """0006's tie extended: taking from a grant without charging it to revenue is refused."""
    cur = fresh_currency()
    version = publish(client, simple_document(cur))
    account_id = make_account("5", currency=cur)
    grant_id = sql_grant(sql, account_id, "2", currency=cur)
    hold_id = str(uuid.uuid4())
    sql.execute(
        "INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, "
        "currency, amount, reservation, ttl_seconds, expires_at) "
        "VALUES (%s, %s, %s, 'h', 'open', 'm', %s, %s, 1, "
        "'{\"n\": 1}', 60, now() + interval '1 minute')",
        (hold_id, account_id, new_id("k"), version, cur),
    )
    txn = sql.execute(
        "INSERT INTO journal_transactions (kind, account_id, hold_id, actor) "
        "VALUES ('reserve', %s, %s, 'sql') RETURNING id",
        (account_id, hold_id),
    ).fetchone()
    assert txn is not None
    entry(sql, txn[0], account_id, "main", "-1", cur)
    entry(sql, txn[0], account_id, "hold", "1", cur)
    sql.commit()
    # Settle for 1: hold -1, main +1, grant -1 ... but revenue only +1 while the grant's 1 goes to main.
    sql.execute(
        "UPDATE holds SET state = 'settled', charge = '{\"amount\": \"1\"}', charged = 1, released = 0, "
        "overage = 0, resolved_by = 'admin', resolved_at = now() WHERE id = %s",
        (hold_id,),
    )
    txn = sql.execute(
        "INSERT INTO journal_transactions (kind, account_id, hold_id, actor) "
        "VALUES ('settle', %s, %s, 'sql') RETURNING id",
        (account_id, hold_id),
    ).fetchone()
    assert txn is not None
    entry(sql, txn[0], account_id, "hold", "-1", cur)
    entry(sql, txn[0], account_id, "main", "2", cur)
    entry(sql, txn[0], account_id, f"grant:{grant_id}", "-1", cur)
    entry(sql, txn[0], f"system:revenue:{cur}:00", "main", "1", cur)
    entry(sql, txn[0], f"system:adjustments:{cur}", "main", "-1", cur)
    with pytest.raises(psycopg.Error) as caught:
        sql.commit()
    sql.rollback()
    assert "account total" in str(caught.value)
    assert remaining(sql, grant_id) == Decimal(2)


def test_two_expiry_passes_at_once_expire_each_grant_once(
    client: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any], sa_url: str
) -> None:
    accounts = [make_account("1") for _ in range(4)]
    grants = [
        sql_grant(sql, accounts[i % 4], "0.25", expires="now() - interval '1 second'") for i in range(40)
    ]
    live = sql_grant(sql, accounts[0], "1")

    async def two_passes() -> list[dict[str, Any]]:
        engines = [make_engine(sa_url, pool_size=2, max_overflow=0) for _ in range(2)]
        try:
            return list(await asyncio.gather(*(GrantService(e).expire_once(CLI, batch=7) for e in engines)))
        finally:
            for e in engines:
                await e.dispose()

    summaries = asyncio.run(two_passes())
    assert all(s["expired"] >= 0 for s in summaries)
    rows = sql.execute(
        "SELECT t.reference, count(*) FROM journal_transactions t WHERE t.kind = 'grant_expiry' "
        "AND t.reference = ANY(%s) GROUP BY t.reference",
        (grants,),
    ).fetchall()
    sql.rollback()
    assert Counter({r[0]: r[1] for r in rows}) == Counter(dict.fromkeys(grants, 1))
    assert all(remaining(sql, g) == 0 for g in grants)
    assert remaining(sql, live) == 1
    for account_id in accounts:
        body = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(FINANCE)).json()
        assert Decimal(body["paid"]) == 1
    audit = sql.execute(
        "SELECT count(*) FROM audit_log WHERE action = 'grant.expire' AND details->>'grant_id' = ANY(%s)",
        (grants,),
    ).fetchone()
    sql.rollback()
    assert audit is not None and audit[0] == 40
    assert_integrity(client)
