"""The database itself refuses what would corrupt the books, whatever SQL is sent."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from ledger.integrity.service import check_on


def new_transaction(conn: psycopg.Connection[Any], account_id: str) -> int:
    row = conn.execute(
        "INSERT INTO journal_transactions (kind, account_id, actor) "
        "VALUES ('adjustment', %s, 'sql') RETURNING id",
        (account_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def add_entry(
    conn: psycopg.Connection[Any], txn: int, account_id: str, amount: str, currency: str = "USD"
) -> None:
    conn.execute(
        "INSERT INTO journal_entries (transaction_id, account_id, currency, amount) VALUES (%s, %s, %s, %s)",
        (txn, account_id, currency, amount),
    )


def refused(sql: psycopg.Connection[Any], statement: str, params: tuple[Any, ...] = ()) -> str:
    with pytest.raises(psycopg.Error) as caught:
        sql.execute(statement, params)
    sql.rollback()
    return str(caught.value)


def refused_at_commit(sql: psycopg.Connection[Any]) -> str:
    with pytest.raises(psycopg.Error) as caught:
        sql.commit()
    sql.rollback()
    return str(caught.value)


def balance_of(sql: psycopg.Connection[Any], account_id: str) -> str:
    row = sql.execute("SELECT balance, held FROM accounts WHERE id = %s", (account_id,)).fetchone()
    assert row is not None
    sql.rollback()
    return f"{row[0].normalize():f}/{row[1].normalize():f}"


@pytest.fixture
def funded(make_account: Any) -> str:
    account_id: str = make_account("5")
    return account_id


def test_update_and_delete_of_entries_are_refused(funded: str, sql: psycopg.Connection[Any]) -> None:
    assert "append-only" in refused(
        sql, "UPDATE journal_entries SET amount = amount * 2 WHERE account_id = %s", (funded,)
    )
    assert "append-only" in refused(sql, "DELETE FROM journal_entries WHERE account_id = %s", (funded,))
    assert "append-only" in refused(sql, "TRUNCATE journal_entries CASCADE")
    assert "append-only" in refused(
        sql, "UPDATE journal_transactions SET actor = 'x' WHERE account_id = %s", (funded,)
    )
    assert "append-only" in refused(sql, "DELETE FROM journal_transactions WHERE account_id = %s", (funded,))
    assert "append-only" in refused(sql, "UPDATE audit_log SET reason = 'hidden'")
    assert "append-only" in refused(sql, "DELETE FROM audit_log")
    assert "append-only" in refused(sql, "DELETE FROM idempotency_keys")
    assert balance_of(sql, funded) == "5/0"


def test_unbalanced_transaction_is_refused_at_commit(funded: str, sql: psycopg.Connection[Any]) -> None:
    txn = new_transaction(sql, funded)
    add_entry(sql, txn, "system:funding:USD", "-1")
    add_entry(sql, txn, funded, "2")  # each statement succeeds: the check is deferred to commit
    assert "unbalanced" in refused_at_commit(sql)
    assert balance_of(sql, funded) == "5/0"


def test_one_legged_transaction_is_refused(funded: str, sql: psycopg.Connection[Any]) -> None:
    txn = new_transaction(sql, funded)
    add_entry(sql, txn, funded, "1")
    assert "fewer than two entries" in refused_at_commit(sql)
    assert balance_of(sql, funded) == "5/0"


def test_zero_amount_and_currency_mismatch_are_refused(funded: str, sql: psycopg.Connection[Any]) -> None:
    txn = new_transaction(sql, funded)
    with pytest.raises(psycopg.errors.CheckViolation):
        add_entry(sql, txn, funded, "0")
    sql.rollback()
    txn = new_transaction(sql, funded)
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        add_entry(sql, txn, funded, "1", currency="EUR")
    sql.rollback()


def test_balanced_direct_sql_is_accepted_and_applied(funded: str, sql: psycopg.Connection[Any]) -> None:
    """The triggers keep the cached balance honest even for postings that bypass the service."""
    txn = new_transaction(sql, funded)
    add_entry(sql, txn, "system:adjustments:USD", "-1.5")
    add_entry(sql, txn, funded, "1.5")
    sql.commit()
    assert balance_of(sql, funded) == "6.5/0"


def test_a_committed_transaction_cannot_be_extended(funded: str, sql: psycopg.Connection[Any]) -> None:
    txn = new_transaction(sql, funded)
    add_entry(sql, txn, "system:adjustments:USD", "-1")
    add_entry(sql, txn, funded, "1")
    sql.commit()
    message = refused(
        sql,
        "INSERT INTO journal_entries (transaction_id, account_id, currency, amount) VALUES "
        "(%s, 'system:adjustments:USD', 'USD', -100), (%s, %s, 'USD', 100)",
        (txn, txn, funded),
    )
    assert "same database transaction" in message
    assert balance_of(sql, funded) == "6/0"


def test_cached_balances_cannot_be_edited(funded: str, sql: psycopg.Connection[Any]) -> None:
    assert "only through journal entries" in refused(
        sql, "UPDATE accounts SET balance = 1000000 WHERE id = %s", (funded,)
    )
    assert "only through journal entries" in refused(
        sql, "UPDATE accounts SET held = 1 WHERE id = %s", (funded,)
    )
    assert "never change" in refused(sql, "UPDATE accounts SET currency = 'EUR' WHERE id = %s", (funded,))
    assert "never deleted" in refused(sql, "DELETE FROM accounts WHERE id = %s", (funded,))
    assert "starts at zero" in refused(
        sql, "INSERT INTO accounts (id, currency, balance) VALUES ('rich-from-nothing', 'USD', 100)"
    )
    assert "accounts_system_prefix" in refused(
        sql, "INSERT INTO accounts (id, kind, currency) VALUES ('sneaky', 'system', 'USD')"
    )
    assert balance_of(sql, funded) == "5/0"


def test_integrity_reports_a_mismatch(funded: str, database: str) -> None:
    """Tamper with triggers disabled (superuser only), inside a transaction that is rolled back."""
    from ledger.settings import normalize_database_url

    async def run() -> dict[str, Any]:
        engine = create_async_engine(normalize_database_url(database))
        try:
            async with engine.connect() as conn:
                await conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
                await conn.exec_driver_sql(f"UPDATE accounts SET balance = 99 WHERE id = '{funded}'")
                await conn.exec_driver_sql(
                    "INSERT INTO journal_transactions (kind, account_id, actor) "
                    f"VALUES ('adjustment', '{funded}', 'tamper')"
                )
                await conn.exec_driver_sql(
                    "INSERT INTO journal_entries (transaction_id, account_id, currency, amount) "
                    "SELECT max(id), 'system:adjustments:USD', 'USD', 7 FROM journal_transactions"
                )
                report = await check_on(conn)
                await conn.rollback()
                return report
        finally:
            await engine.dispose()

    report = asyncio.run(run())
    assert report["ok"] is False
    assert {
        "account_id": funded,
        "balance": "99",
        "journal_balance": "5",
        "held": "0",
        "journal_held": "0",
    } in (report["account_mismatches"])
    assert report["totals"]["USD"] == "7"
    assert any(u["sum"] == "7" for u in report["unbalanced_transactions"])


def test_checked_transaction_takes_no_more_entries(funded: str, sql: psycopg.Connection[Any]) -> None:
    """SET CONSTRAINTS ALL IMMEDIATE runs the balance check early; entries added after it are refused."""
    txn = new_transaction(sql, funded)
    add_entry(sql, txn, "system:adjustments:USD", "-1")
    add_entry(sql, txn, funded, "1")
    sql.execute("SET CONSTRAINTS ALL IMMEDIATE")
    with pytest.raises(psycopg.Error) as caught:
        add_entry(sql, txn, funded, "1000000")
    sql.rollback()
    assert "already checked" in str(caught.value)
    # and an early check of a transaction that has too few entries is refused at once
    new_transaction(sql, funded)
    with pytest.raises(psycopg.Error) as caught:
        sql.execute("SET CONSTRAINTS ALL IMMEDIATE")
    sql.rollback()
    assert "fewer than two" in str(caught.value)
    assert balance_of(sql, funded) == "5/0"
