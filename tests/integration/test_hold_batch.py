"""Group commit (ledger.holds.batch, migration 0015) against the real database.

Several operations submitted together travel in one `ledger_hold_batch` call: each gets
its own exact outcome, holds on one account are checked against available funds in
arrival order, one operation the database refuses never fails its neighbours, and
calling the function directly cannot write what the triggers refuse. The tests that
submit one batch run with one batch in flight per lane (`pipeline=1`) and with two (the
default, `LEDGER_BATCH_PIPELINE=2`); the last tests are the pipeline's own (two batches
in flight on one connection, a refused batch among them, a retried deadlock, a
connection lost under a batch).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from ledger.errors import DatabaseUnavailable
from ledger.holds.batch import HoldBatcher
from ledger.holds.lane import Lane
from ledger.ids import uuid7
from ledger.metrics import HOLD_BATCH_SIZE
from tests.conftest import assert_integrity, fresh_currency, new_id, publish, simple_document


@pytest.fixture
def world(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    currency = fresh_currency()
    version = publish(client, simple_document(currency))
    return {"currency": currency, "version": version, "account": make_account("3", currency=currency)}


def reserve_op(
    world: dict[str, Any], amount: str, *, key: str | None = None, **changes: Any
) -> dict[str, Any]:
    op = {
        "op": "reserve",
        "id": uuid7(),
        "account_id": world["account"],
        "key": key or new_id("k"),
        "request_hash": "h",
        "model": "t-simple",
        "price_version": world["version"],
        "currency": world["currency"],
        "amount": Decimal(amount),
        "reservation": {"amount": amount},
        "ttl": 60,
        "metadata": {},
        "pinned": False,
        "actor": "gateway:test",
    }
    return {**op, **changes}


def settle_op(world: dict[str, Any], hold: Any, charged: str, **changes: Any) -> dict[str, Any]:
    op = {
        "op": "settle",
        "id": hold.id,
        "held": hold.amount,
        "charged": Decimal(charged),
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        "charge": {"amount": charged},
        "flagged": False,
        "review_reason": None,
        "actor": "gateway:test",
        "revenue": f"system:revenue:{world['currency']}:00",
    }
    return {**op, **changes}


@pytest.fixture(params=[1, 2], ids=["lane", "pipelined"])
def pipeline(request: pytest.FixtureRequest) -> int:
    """LEDGER_BATCH_PIPELINE: batches in flight on a lane's connection (default 2)."""
    return int(request.param)


def together(database: str, *ops: dict[str, Any], account: str, pipeline: int = 2) -> list[Any]:
    """Submit every op at once (one batch, in this order); each one's row or exception."""

    async def run() -> list[Any]:
        batcher = HoldBatcher(database, lanes=1, pipeline=pipeline)
        try:
            return await asyncio.gather(*(batcher.submit(op, account) for op in ops), return_exceptions=True)
        finally:
            await batcher.close()

    return asyncio.run(run())


def account_row(sql: psycopg.Connection[Any], account: str) -> tuple[Decimal, Decimal]:
    row = sql.execute("SELECT balance, held FROM accounts WHERE id = %s", (account,)).fetchone()
    sql.rollback()
    assert row is not None
    return row[0], row[1]


def batches_observed() -> float:
    return next(s.value for m in HOLD_BATCH_SIZE.collect() for s in m.samples if s.name.endswith("_count"))


def test_reserves_on_one_account_are_checked_in_arrival_order_in_one_batch(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    before = batches_observed()
    rows = together(
        database, *(reserve_op(world, "1") for _ in range(5)), account=world["account"], pipeline=pipeline
    )
    assert batches_observed() == before + 1  # five requests, one round trip, one transaction
    assert [r.op_outcome for r in rows] == ["created"] * 3 + ["insufficient"] * 2
    assert rows[3].op_detail == {
        "balance": "3.000000000000",
        "held": "3.000000000000",
        "credit_limit": "0.000000000000",
        "lapsed": "0",  # no expired grant (0020)
    }
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(3))
    assert_integrity(client)


def test_an_operation_the_database_refuses_does_not_fail_its_neighbours(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    # A pinned version that does not exist: the hold trigger refuses the insert, which
    # aborts the whole batch; the batcher then runs each operation alone.
    bad = reserve_op(world, "1", pinned=True, price_version="no-such-version")
    rows = together(
        database,
        reserve_op(world, "1"),
        bad,
        reserve_op(world, "1"),
        account=world["account"],
        pipeline=pipeline,
    )
    assert rows[0].op_outcome == rows[2].op_outcome == "created"
    assert isinstance(rows[1], psycopg.errors.ForeignKeyViolation)
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(2))
    assert_integrity(client)


def test_one_key_twice_in_a_batch_makes_one_hold(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    key = new_id("dup")
    first, second = together(
        database,
        reserve_op(world, "1", key=key),
        reserve_op(world, "1", key=key),
        account=world["account"],
        pipeline=pipeline,
    )
    assert (first.op_outcome, second.op_outcome) == ("created", "exists")
    assert first.id == second.id
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(1))


def test_settle_and_release_of_one_hold_in_one_batch_have_one_winner(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    (hold,) = together(database, reserve_op(world, "2"), account=world["account"], pipeline=pipeline)
    release = {"op": "release", "id": hold.id, "actor": "gateway:test"}
    settled, released = together(
        database, settle_op(world, hold, "0.5"), release, account=world["account"], pipeline=pipeline
    )
    assert settled.op_outcome == "settled"
    assert settled.charged == Decimal("0.5") and settled.released == Decimal("1.5")
    assert released.op_outcome == "fallback"  # answered by the next batch: the hold is settled
    assert account_row(sql, world["account"]) == (Decimal("2.5"), Decimal(0))
    assert_integrity(client)


def test_a_settle_then_reserve_in_one_batch_sees_the_funds_the_settle_freed(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    (hold,) = together(database, reserve_op(world, "3"), account=world["account"], pipeline=pipeline)
    settled, reserved, refused = together(
        database,
        settle_op(world, hold, "1"),
        reserve_op(world, "2"),
        reserve_op(world, "0.000000000001"),
        account=world["account"],
        pipeline=pipeline,
    )
    assert (settled.op_outcome, reserved.op_outcome, refused.op_outcome) == (
        "settled",
        "created",
        "insufficient",
    )
    assert account_row(sql, world["account"]) == (Decimal(2), Decimal(2))
    assert_integrity(client)


def test_a_forged_settle_through_the_function_is_refused_by_the_triggers(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    (hold,) = together(database, reserve_op(world, "2"), account=world["account"], pipeline=pipeline)
    # The revenue leg pointed at a customer account: that entry has no running position
    # (revenue shards are system accounts), so the entries' statement trigger refuses it.
    forged = settle_op(world, hold, "1", revenue=world["account"])
    (result,) = together(database, forged, account=world["account"], pipeline=pipeline)
    assert isinstance(result, psycopg.errors.CheckViolation)
    assert "does not carry the account's running balance" in str(result)
    # A settle that names another amount than the hold's is not applied at all.
    (mismatch,) = together(
        database,
        settle_op(world, hold, "1", held=Decimal("1.5")),
        account=world["account"],
        pipeline=pipeline,
    )
    assert mismatch.op_outcome == "fallback"
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(2))
    assert_integrity(client)


async def lock_waiters(database: str, count: int) -> None:
    """Until `count` batches wait for a row lock (each on its own connection)."""
    async with await psycopg.AsyncConnection.connect(database, autocommit=True) as probe:
        for _ in range(1000):
            cursor = await probe.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND query LIKE '%%ledger_hold_batch(%%'"
            )
            row = await cursor.fetchone()
            if row is not None and row[0] >= count:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"{count} batch(es) never waited for the lock")


def budget_row(sql: psycopg.Connection[Any], account: str, key: str) -> tuple[Decimal, Decimal] | None:
    """(held, period spend) of a key's budget row, or None."""
    row = sql.execute(
        "SELECT b.held, ledger_budget_period_spent(b) FROM budgets b "
        "WHERE account_id = %s AND budget_key = %s",
        (account, key),
    ).fetchone()
    sql.rollback()
    return None if row is None else (row[0], row[1])


def set_budget(
    sql: psycopg.Connection[Any], account: str, key: str, amount: str, threshold: str | None
) -> None:
    sql.execute(
        "INSERT INTO budgets (account_id, budget_key, amount, period, alert_threshold, day_start, "
        "week_start, month_start) VALUES (%s, %s, %s, 'daily', %s, ledger_budget_window('day', now()), "
        "ledger_budget_window('week', now()), ledger_budget_window('month', now()))",
        (account, key, Decimal(amount), None if threshold is None else Decimal(threshold)),
    )
    sql.commit()


def test_budgeted_reserves_are_checked_in_arrival_order_after_the_funds(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    set_budget(sql, world["account"], "proj", "2.5", None)
    rows = together(
        database,
        reserve_op(world, "1", budget_key="proj"),
        reserve_op(world, "1", budget_key="proj"),
        reserve_op(world, "1", budget_key="proj"),  # 2 held + 1 > 2.5: the budget refuses
        reserve_op(world, "1", budget_key="new-key"),  # no budget: unlimited, its row made on first use
        reserve_op(world, "1", budget_key="proj"),  # funds (3 - 3 held) and budget both refuse: funds
        account=world["account"],
        pipeline=pipeline,
    )
    assert [r.op_outcome for r in rows] == ["created", "created", "budget", "created", "insufficient"]
    assert rows[2].op_detail == {
        "budget": "2.500000000000",
        "spent": "0.000000000000",
        "held": "2.000000000000",
        "period_start": rows[2].op_detail["period_start"],
        "period_end": rows[2].op_detail["period_end"],
    }
    assert rows[2].op_detail["period_start"] < rows[2].op_detail["period_end"]
    assert rows[0].budget_key == "proj" and rows[3].budget_key == "new-key"
    assert budget_row(sql, world["account"], "proj") == (Decimal(2), Decimal(0))
    assert budget_row(sql, world["account"], "new-key") == (Decimal(1), Decimal(0))
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(3))
    assert_integrity(client)


def test_a_budgeted_settle_and_release_move_the_budget_and_the_alert_comes_back_once(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any], pipeline: int
) -> None:
    set_budget(sql, world["account"], "proj", "2", "0.5")
    a, b, c = together(
        database, *(reserve_op(world, "0.5", budget_key="proj") for _ in range(3)), account=world["account"]
    )
    first, released = together(
        database,
        settle_op(world, a, "0.6"),
        {"op": "release", "id": b.id, "actor": "gateway:test"},
        account=world["account"],
        pipeline=pipeline,
    )
    assert (first.op_outcome, released.op_outcome) == ("settled", "released")
    assert first.op_detail is None  # 0.6 < 0.5 x 2: no alert yet
    (second,) = together(database, settle_op(world, c, "0.5"), account=world["account"], pipeline=pipeline)
    assert second.op_outcome == "settled"
    assert second.op_detail == {
        "budget_alert": {
            "account_id": world["account"],
            "budget_key": "proj",
            "amount": "2.000000000000",
            "period": "daily",
            "alert_threshold": "0.500000000000",
            "period_spent": "1.100000000000",
        }
    }
    assert budget_row(sql, world["account"], "proj") == (Decimal(0), Decimal("1.1"))
    (d,) = together(database, reserve_op(world, "0.5", budget_key="proj"), account=world["account"])
    (third,) = together(database, settle_op(world, d, "0.1"), account=world["account"], pipeline=pipeline)
    assert (third.op_outcome, third.op_detail) == ("settled", None)  # once per period
    assert budget_row(sql, world["account"], "proj") == (Decimal(0), Decimal("1.2"))
    assert_integrity(client)


@pytest.mark.parametrize("pipeline", [1, 2])
def test_a_second_batch_of_a_lane_waits_for_the_first(
    client: TestClient[Any],
    world: dict[str, Any],
    make_account: Any,
    database: str,
    sql: psycopg.Connection[Any],
    pipeline: int,
) -> None:
    """A lane's batches run one after the other on its one connection, even for other accounts."""
    other = {**world, "account": make_account("3", currency=world["currency"])}

    async def run() -> tuple[Any, Any, bool]:
        batcher = HoldBatcher(database, lanes=1, pipeline=pipeline)
        try:
            first = asyncio.ensure_future(batcher.submit(reserve_op(world, "1"), world["account"]))
            await lock_waiters(database, 1)  # the first batch waits for the account that sql holds
            second = asyncio.ensure_future(batcher.submit(reserve_op(other, "1"), other["account"]))
            done, _ = await asyncio.wait({second}, timeout=2)
            answered_while_first_waited = second in done and not first.done()
            sql.rollback()  # the first batch's account is free again
            return await first, await second, answered_while_first_waited
        finally:
            await batcher.close()

    sql.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (world["account"],))
    first, second, overlapped = asyncio.run(run())
    assert (first.op_outcome, second.op_outcome) == ("created", "created")
    assert overlapped is False
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(1))
    assert account_row(sql, other["account"]) == (Decimal(3), Decimal(1))
    assert_integrity(client)


# --- the pipelined lane (LEDGER_BATCH_PIPELINE, default 2) -----------------------------


@asynccontextmanager
async def pipelined(database: str) -> AsyncIterator[tuple[HoldBatcher, Lane]]:
    """A batcher of one pipelined lane, closed (within 10 s) when the block ends."""
    batcher = HoldBatcher(database, lanes=1)
    (lane,) = batcher.lanes
    assert isinstance(lane, Lane)
    try:
        yield batcher, lane
    finally:
        await asyncio.wait_for(batcher.close(), 10)


async def until_in_flight(lane: Lane, count: int) -> None:
    for _ in range(500):
        if lane.in_flight >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the lane never had {count} batches in flight")


def test_the_pipelined_lane_sends_the_next_batch_on_its_one_connection_and_it_is_decided_after_the_first(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any]
) -> None:
    async def run() -> tuple[Any, Any, int]:
        async with pipelined(database) as (batcher, lane):
            first = asyncio.ensure_future(batcher.submit(reserve_op(world, "2"), world["account"]))
            await lock_waiters(database, 1)  # the first batch waits for the account that sql holds
            second = asyncio.ensure_future(batcher.submit(reserve_op(world, "2"), world["account"]))
            await until_in_flight(lane, 2)  # sent behind it, on the same connection
            await asyncio.sleep(0.2)
            answered_early = second.done()
            sql.rollback()
            return await first, await second, int(answered_early)

    before = batches_observed()
    sql.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (world["account"],))
    first, second, answered_early = asyncio.run(run())
    # Its own transaction, run by the one backend after the first committed: it sees the
    # first's hold (3 covers one hold of 2), and it never ran while the first waited.
    assert (first.op_outcome, second.op_outcome, answered_early) == ("created", "insufficient", 0)
    assert batches_observed() == before + 2
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(2))
    assert_integrity(client)


def test_a_batch_refused_as_a_whole_in_the_pipeline_is_split_and_the_batch_behind_it_is_untouched(
    client: TestClient[Any],
    world: dict[str, Any],
    make_account: Any,
    database: str,
    sql: psycopg.Connection[Any],
) -> None:
    rich = {**world, "account": make_account("10", currency=world["currency"])}
    bad = reserve_op(rich, "1", pinned=True, price_version="no-such-version")

    async def run() -> list[Any]:
        async with pipelined(database) as (batcher, lane):
            first = [
                asyncio.ensure_future(batcher.submit(op, rich["account"]))
                for op in (reserve_op(rich, "1"), bad, reserve_op(rich, "1"))
            ]
            await lock_waiters(database, 1)
            # As many operations as the batch in flight carries: sent behind it.
            second = [
                asyncio.ensure_future(batcher.submit(reserve_op(rich, "0.5"), rich["account"]))
                for _ in range(3)
            ]
            await until_in_flight(lane, 2)
            sql.rollback()
            return await asyncio.gather(*first, *second, return_exceptions=True)

    sql.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (rich["account"],))
    rows = asyncio.run(run())
    assert isinstance(rows[1], psycopg.errors.ForeignKeyViolation)
    assert [r.op_outcome for i, r in enumerate(rows) if i != 1] == ["created"] * 5
    assert account_row(sql, rich["account"]) == (Decimal(10), Decimal("3.5"))
    assert_integrity(client)


def test_a_deadlocked_batch_in_the_pipelined_lane_is_retried(
    client: TestClient[Any],
    world: dict[str, Any],
    make_account: Any,
    database: str,
    sql: psycopg.Connection[Any],
) -> None:
    one, two = sorted([world["account"], make_account("3", currency=world["currency"])])
    sql.execute("SET deadlock_timeout = '20s'")  # the batch's backend is the one that detects it
    sql.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (two,))
    taken: list[BaseException | None] = []

    def take_the_first_account() -> None:
        try:
            sql.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (one,))
            taken.append(None)
        except psycopg.Error as error:
            taken.append(error)

    async def run() -> list[Any]:
        async with pipelined(database) as (batcher, _):
            ops = [
                asyncio.ensure_future(batcher.submit(reserve_op({**world, "account": a}, "1"), a))
                for a in (one, two)
            ]
            await lock_waiters(database, 1)  # the batch holds `one` (sorted first) and waits for `two`
            taker = threading.Thread(target=take_the_first_account)
            taker.start()  # sql now waits for `one`: a deadlock, and the batch is its victim
            await asyncio.to_thread(taker.join, 30)
            await lock_waiters(database, 1)  # the retry waits for `one`, which sql now holds
            sql.rollback()
            return await asyncio.gather(*ops, return_exceptions=True)

    before = batches_observed()
    rows = asyncio.run(run())
    assert taken == [None]
    assert [r.op_outcome for r in rows] == ["created", "created"]
    assert batches_observed() == before + 1  # retried whole, not split into two batches of one
    assert account_row(sql, one) == (Decimal(3), Decimal(1))
    assert account_row(sql, two) == (Decimal(3), Decimal(1))
    assert_integrity(client)


def test_a_lost_connection_answers_503_for_every_batch_in_flight_and_the_lane_connects_again(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any]
) -> None:
    async def run() -> tuple[list[Any], Any]:
        async with pipelined(database) as (batcher, lane):
            flying = [asyncio.ensure_future(batcher.submit(reserve_op(world, "1"), world["account"]))]
            await lock_waiters(database, 1)
            flying.append(asyncio.ensure_future(batcher.submit(reserve_op(world, "1"), world["account"])))
            await until_in_flight(lane, 2)
            async with await psycopg.AsyncConnection.connect(database, autocommit=True) as admin:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND query LIKE '%%ledger_hold_batch%%'"
                )
            lost = await asyncio.gather(*flying, return_exceptions=True)
            sql.rollback()
            again = await batcher.submit(reserve_op(world, "1"), world["account"])
            return lost, again

    sql.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (world["account"],))
    lost, again = asyncio.run(run())
    assert [type(r) for r in lost] == [DatabaseUnavailable, DatabaseUnavailable]
    assert again.op_outcome == "created"
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(1))  # the killed batches left nothing
    assert_integrity(client)


def test_a_connection_cut_without_a_word_answers_503_and_the_lane_connects_again(
    client: TestClient[Any], world: dict[str, Any], database: str, sql: psycopg.Connection[Any]
) -> None:
    """A reset or a dead network, not a server that says goodbye: libpq drops the socket."""
    reserve = reserve_op(world, "1")

    async def run() -> tuple[Any, Any, Any]:
        async with pipelined(database) as (batcher, lane):
            first = asyncio.ensure_future(batcher.submit(reserve, world["account"]))
            await lock_waiters(database, 1)
            with socket.socket(fileno=os.dup(lane._fd)) as cut:
                cut.shutdown(socket.SHUT_RDWR)
            lost = await asyncio.gather(first, return_exceptions=True)
            sql.rollback()  # the backend never noticed: its batch commits once it has the lock
            again = await batcher.submit(reserve_op(world, "1"), world["account"])
            retried = await batcher.submit(reserve, world["account"])  # the gateway's retry, same key
            return lost[0], again, retried

    sql.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (world["account"],))
    lost, again, retried = asyncio.run(run())
    assert isinstance(lost, DatabaseUnavailable)
    assert again.op_outcome == "created"
    # A 503 says "not known", not "not done": the cut batch committed, and the retry with
    # its key is answered with that hold instead of making a second one.
    assert retried.op_outcome == "exists"
    assert account_row(sql, world["account"]) == (Decimal(3), Decimal(2))
    assert_integrity(client)


def test_batches_larger_than_the_socket_takes_at_once_go_out_whole(
    client: TestClient[Any],
    world: dict[str, Any],
    make_account: Any,
    database: str,
    sql: psycopg.Connection[Any],
) -> None:
    # 300 operations of about 30 KB each: two batches (200 and 100) of about 6 and 3 MB,
    # more than a socket buffer takes at once, so libpq's flush returns "not yet" and the
    # lane's writer callback finishes sending while the reader takes the results.
    rich = {**world, "account": make_account("1000", currency=world["currency"])}
    ops = [reserve_op(rich, "1", metadata={"note": "x" * 30000}) for _ in range(300)]
    rows = together(database, *ops, account=rich["account"])
    assert [r.op_outcome for r in rows] == ["created"] * 300
    assert account_row(sql, rich["account"]) == (Decimal(1000), Decimal(300))
    assert_integrity(client)
