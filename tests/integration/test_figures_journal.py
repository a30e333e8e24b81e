"""The journal's totals kept by `JournalTally`: exact, and never missing a transaction that
took its id before a later one committed (an identity id is handed out before commit)."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import psycopg
from litestar.testing import TestClient

from tests.conftest import fresh_currency


def post_deposit(conn: psycopg.Connection[Any], account_id: str, currency: str, amount: str) -> int:
    """A deposit as the service writes one: lock the account, then the transaction and its entries."""
    conn.execute("SELECT id FROM accounts WHERE id = %s FOR UPDATE", (account_id,))
    row = conn.execute(
        "INSERT INTO journal_transactions (kind, account_id, actor) "
        "VALUES ('deposit', %s, 'test') RETURNING id",
        (account_id,),
    ).fetchone()
    assert row is not None
    conn.execute(
        "INSERT INTO journal_entries (transaction_id, account_id, currency, amount) VALUES (%s, %s, %s, %s), "
        "(%s, %s, %s, %s)",
        (row[0], account_id, currency, amount, row[0], f"system:funding:{currency}", currency, f"-{amount}"),
    )
    return int(row[0])


def test_a_transaction_committed_after_a_higher_id_is_still_counted(
    client: TestClient[Any], make_account: Any, database: str, sa_url: str
) -> None:
    from ledger.db import make_engine
    from ledger.figures import read_figures
    from ledger.figures.journal import JournalTally

    currency = fresh_currency()
    first, second = make_account(currency=currency), make_account(currency=currency)
    tally = JournalTally()

    async def reads(n: int) -> list[Any]:
        engine = make_engine(sa_url, pool_size=1, max_overflow=0)
        try:
            return [await read_figures(engine, tally) for _ in range(n)]
        finally:
            await engine.dispose()

    def deposits(figures: Any) -> tuple[int, Decimal]:
        count = figures.journal_counts.get("deposit", 0)
        return count, figures.journal_amounts.get(("deposit", currency), Decimal(0))

    baseline = deposits(asyncio.run(reads(1))[0])
    slow = psycopg.connect(database)
    try:
        low_id = post_deposit(slow, first, currency, "1.000000000001")  # takes its id, does not commit
        with psycopg.connect(database) as fast:
            high_id = post_deposit(fast, second, currency, "2")
        assert high_id > low_id
        seen = asyncio.run(reads(3))  # the frontier must not pass the uncommitted id
        for figures in seen:
            assert deposits(figures) == (baseline[0] + 1, baseline[1] + Decimal("2"))
        slow.commit()
    finally:
        slow.close()
    for figures in asyncio.run(reads(3)):  # the late commit counts, and keeps counting once kept
        assert deposits(figures) == (baseline[0] + 2, baseline[1] + Decimal("3.000000000001"))
    assert tally.frontier >= high_id
    with psycopg.connect(database) as conn:
        total = conn.execute("SELECT count(*) FROM journal_transactions WHERE kind = 'deposit'").fetchone()
    assert total == (deposits(figures)[0],)
