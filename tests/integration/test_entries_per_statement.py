"""Entries of batched journal transactions (migrations 0015, 0016, 0017) cannot corrupt the books either.

Their accounts are moved once per statement by `journal_entries_apply`, from the running
positions the entries carry; whatever SQL is sent, a position that is not the account's
running balance and held, a hold book below zero, a mix with other entries, a system
account with a position, an unknown account or a grant book is refused, and a batched
transaction must still balance.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from tests.conftest import GATEWAY, auth, new_id
from tests.integration.test_journal_invariants import (
    add_entry,
    balance_of,
    new_transaction,
    refused,
    refused_at_commit,
)

ENTRY = (
    "INSERT INTO journal_entries "
    "(transaction_id, account_id, currency, book, amount, balance_after, held_after) VALUES "
)


@pytest.fixture
def funded(make_account: Any) -> str:
    account_id: str = make_account("5")
    return account_id


def batched(sql: psycopg.Connection[Any], account_id: str, kind: str = "reserve") -> int:
    row = sql.execute(
        "INSERT INTO journal_transactions (kind, account_id, actor, batched) VALUES (%s, %s, 'sql', true) "
        "RETURNING id",
        (kind, account_id),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_batched_entries_with_their_running_positions_move_the_account_once(
    sql: psycopg.Connection[Any], funded: str
) -> None:
    txn = batched(sql, funded)
    sql.execute(
        ENTRY + "(%s, %s, 'USD', 'main', -1, 4, 0), (%s, %s, 'USD', 'hold', 1, 5, 1)",
        (txn, funded, txn, funded),
    )
    # Seen inside the transaction (a reserve without its hold is not committed: the books
    # are shared by every test, and the integrity check would rightly object).
    row = sql.execute("SELECT balance, held FROM accounts WHERE id = %s", (funded,)).fetchone()
    assert row is not None and (row[0], row[1]) == (5, 1)
    rows = sql.execute(
        "SELECT balance_after, held_after FROM journal_entries WHERE transaction_id = %s ORDER BY id", (txn,)
    ).fetchall()
    assert [(b, h) for b, h in rows] == [(4, 0), (5, 1)]
    sql.rollback()
    assert balance_of(sql, funded) == "5/0"


@pytest.mark.parametrize(
    ("positions", "why"),
    [
        (("4.5", "0", "5", "1"), "running balance"),  # balance_after that is not the running balance
        (("4", "0", "5", "0"), "running balance"),  # held_after that is not the running held
        ((None, None, "5", "1"), "running balance"),  # a customer entry without its position
    ],
)
def test_a_wrong_running_position_is_refused(
    sql: psycopg.Connection[Any], funded: str, positions: tuple[str | None, ...], why: str
) -> None:
    txn = batched(sql, funded)
    b1, h1, b2, h2 = positions
    message = refused(
        sql,
        ENTRY + "(%s, %s, 'USD', 'main', -1, %s, %s), (%s, %s, 'USD', 'hold', 1, %s, %s)",
        (txn, funded, b1, h1, txn, funded, b2, h2),
    )
    assert why in message
    assert balance_of(sql, funded) == "5/0"


def test_the_hold_book_never_goes_below_zero(sql: psycopg.Connection[Any], funded: str) -> None:
    txn = batched(sql, funded, "release")
    message = refused(
        sql,
        ENTRY + "(%s, %s, 'USD', 'hold', -1, 4, -1), (%s, %s, 'USD', 'main', 1, 5, -1)",
        (txn, funded, txn, funded),
    )
    assert "below zero" in message
    assert balance_of(sql, funded) == "5/0"


def test_batched_and_other_entries_of_one_account_in_one_statement_are_refused(
    sql: psycopg.Connection[Any], funded: str
) -> None:
    txn = batched(sql, funded)
    plain = sql.execute(
        "INSERT INTO journal_transactions (kind, account_id, actor) "
        "VALUES ('adjustment', %s, 'sql') RETURNING id",
        (funded,),
    ).fetchone()
    assert plain is not None
    message = refused(
        sql,
        ENTRY + "(%s, %s, 'USD', 'main', -1, 4, 0), (%s, %s, 'USD', 'main', 1, NULL, NULL)",
        (txn, funded, plain[0], funded),
    )
    assert "batched and other entries" in message
    assert balance_of(sql, funded) == "5/0"


def test_a_system_account_takes_no_running_position(sql: psycopg.Connection[Any], funded: str) -> None:
    txn = batched(sql, funded, "settle")
    message = refused(
        sql,
        ENTRY + "(%s, %s, 'USD', 'main', -1, 4, 0), (%s, 'system:revenue:USD:00', 'USD', 'main', 1, 1, 0)",
        (txn, funded, txn),
    )
    assert "system account" in message


def test_unknown_accounts_other_currencies_and_grant_books_are_refused(
    sql: psycopg.Connection[Any], funded: str
) -> None:
    txn = batched(sql, funded)
    message = refused(sql, ENTRY + "(%s, 'no-such-account', 'USD', 'main', -1, NULL, NULL)", (txn,))
    assert "does not exist in currency" in message
    txn = batched(sql, funded)
    message = refused(sql, ENTRY + "(%s, %s, 'EUR', 'main', -1, 4, 0)", (txn, funded))
    assert "does not exist in currency" in message
    txn = batched(sql, funded)
    message = refused(sql, ENTRY + "(%s, %s, 'USD', 'grant:' || gen_random_uuid(), -1, 4, 0)", (txn, funded))
    assert "main and hold books only" in message


def test_only_hold_movements_are_batched(sql: psycopg.Connection[Any], funded: str) -> None:
    message = refused(
        sql,
        "INSERT INTO journal_transactions (kind, account_id, actor, batched) "
        "VALUES ('deposit', %s, 'sql', true)",
        (funded,),
    )
    assert "journal_transactions_batched_kind" in message


def test_a_batched_transaction_must_still_balance(sql: psycopg.Connection[Any], funded: str) -> None:
    txn = batched(sql, funded)
    sql.execute(ENTRY + "(%s, %s, 'USD', 'main', -1, 4, 0)", (txn, funded))
    assert "fewer than two entries" in refused_at_commit(sql)
    assert balance_of(sql, funded) == "5/0"


def test_a_batched_statement_never_overwrites_a_change_it_did_not_wait_for(
    sql: psycopg.Connection[Any], funded: str, database: str
) -> None:
    """Migration 0016: the one update applies only to an account row still as it was read.

    Another transaction posts +1 to the account and has not committed. A batched statement
    that did not lock the account first computes its positions from the committed 5, then
    waits for the row; once the +1 commits, applying its positions would erase it. It is
    refused instead (40001: the service retries), and the +1 stays.
    """
    with psycopg.connect(database) as other, psycopg.connect(database, autocommit=True) as watcher:
        deposit = new_transaction(other, funded)
        add_entry(other, deposit, "system:adjustments:USD", "-1")
        add_entry(other, deposit, funded, "1")  # the account row is now locked by `other`
        txn = batched(sql, funded)
        outcome: list[BaseException | None] = []

        def apply() -> None:
            try:
                sql.execute(
                    ENTRY + "(%s, %s, 'USD', 'main', -1, 4, 0), (%s, %s, 'USD', 'hold', 1, 5, 1)",
                    (txn, funded, txn, funded),
                )
                outcome.append(None)
            except psycopg.Error as error:
                outcome.append(error)

        worker = threading.Thread(target=apply)
        worker.start()
        pid = sql.info.backend_pid
        for _ in range(200):  # until it waits for the row lock
            row = watcher.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row is not None and row[0] == "Lock":
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the batched statement never waited for the account")
        other.commit()
        worker.join(timeout=30)
    assert outcome and isinstance(outcome[0], psycopg.errors.SerializationFailure), outcome
    assert "changed while its batched entries were applied" in str(outcome[0])
    sql.rollback()
    assert balance_of(sql, funded) == "6/0"


# Migration 0017: entries marked `batched` skip the row trigger; the statement trigger checks
# each of them for what the row trigger checked. Direct SQL may mark entries too.
MARKED = (
    "INSERT INTO journal_entries "
    "(transaction_id, account_id, currency, book, amount, balance_after, held_after, batched) VALUES "
)


def test_marked_entries_with_their_running_positions_move_the_account_once(
    sql: psycopg.Connection[Any], funded: str
) -> None:
    txn = batched(sql, funded)
    sql.execute(
        MARKED + "(%s, %s, 'USD', 'main', -1, 4, 0, true), (%s, %s, 'USD', 'hold', 1, 5, 1, true)",
        (txn, funded, txn, funded),
    )
    row = sql.execute(
        "SELECT a.balance, a.held, (SELECT bool_and(e.created_at = now()) FROM journal_entries e "
        "WHERE e.transaction_id = %s) FROM accounts a WHERE a.id = %s",
        (txn, funded),
    ).fetchone()
    assert row is not None and (row[0], row[1], row[2]) == (5, 1, True)
    sql.rollback()


def test_a_marked_entry_of_a_transaction_that_is_not_batched_is_refused(
    sql: psycopg.Connection[Any], funded: str
) -> None:
    plain = new_transaction(sql, funded)
    message = refused(
        sql,
        MARKED + "(%s, 'system:adjustments:USD', 'USD', 'main', -1, NULL, NULL, true), "
        "(%s, %s, 'USD', 'main', 1, 6, 0, true)",
        (plain, plain, funded),
    )
    assert "may be marked batched" in message  # else nothing would move the account
    assert balance_of(sql, funded) == "5/0"


def test_a_marked_entry_of_no_transaction_is_refused(sql: psycopg.Connection[Any], funded: str) -> None:
    message = refused(sql, MARKED + "(987654321012, %s, 'USD', 'main', -1, 4, 0, true)", (funded,))
    assert "journal transaction 987654321012 does not exist" in message


def test_a_marked_entry_may_not_join_a_committed_transaction(
    sql: psycopg.Connection[Any], funded: str, client: Any, contract_version: str
) -> None:
    r = client.post(
        "/v1/holds",
        json={
            "account_id": funded,
            "idempotency_key": new_id("k"),
            "model": "gpt-6-luna",
            "max_output_tokens": 10,
            "max_input_tokens": 10,
            "price_version": contract_version,
        },
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201, r.text
    row = sql.execute(
        "SELECT id FROM journal_transactions WHERE hold_id = %s AND batched", (r.json()["id"],)
    ).fetchone()
    assert row is not None  # the group commit's reserve, committed
    sql.rollback()
    message = refused(sql, MARKED + "(%s, %s, 'USD', 'hold', 1, 5, 1, true)", (row[0], funded))
    assert "created in the same database transaction" in message


def test_a_marked_entry_may_not_join_a_sealed_transaction(sql: psycopg.Connection[Any], funded: str) -> None:
    txn = batched(sql, funded)
    sql.execute(
        MARKED + "(%s, %s, 'USD', 'main', -1, 4, 0, true), (%s, %s, 'USD', 'hold', 1, 5, 1, true)",
        (txn, funded, txn, funded),
    )
    sql.execute("SET CONSTRAINTS ALL IMMEDIATE")  # checked as balanced, so sealed
    message = refused(
        sql,
        MARKED + "(%s, %s, 'USD', 'hold', -1, 4, 0, true), (%s, %s, 'USD', 'main', 1, 5, 0, true)",
        (txn, funded, txn, funded),
    )
    assert "already checked as balanced" in message


def test_a_marked_entry_posts_to_main_or_hold_and_is_dated_now(
    sql: psycopg.Connection[Any], funded: str
) -> None:
    txn = batched(sql, funded)
    message = refused(
        sql, MARKED + "(%s, %s, 'USD', 'grant:' || gen_random_uuid(), -1, 4, 0, true)", (txn, funded)
    )
    assert "main and hold books only" in message
    txn = batched(sql, funded)
    message = refused(
        sql,
        "INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount, balance_after, "
        "held_after, batched, created_at) VALUES "
        "(%s, %s, 'USD', 'main', -1, 4, 0, true, now() - interval '1 day'), "
        "(%s, %s, 'USD', 'hold', 1, 5, 1, true, now() - interval '1 day')",
        (txn, funded, txn, funded),
    )
    assert "dated by the database" in message
    assert balance_of(sql, funded) == "5/0"
