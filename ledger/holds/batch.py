"""Group commit: the gateway's reserves, settles and releases, many per database round trip.

One `HoldBatcher` per process (per event loop), with a few lanes (`LEDGER_BATCH_LANES`),
each with its own connection; an operation goes to the lane of its account (a stable
hash), so every operation on one account goes through one lane: a hot account's
operations coalesce into one batch per round trip instead of queueing for its row lock
in several, while different accounts' batches run in parallel on the database's cores.
In each lane, each request's operation is queued; the lane's runner takes everything
queued, sends it as ONE call of the database function
`ledger_hold_batch` (migration 0015: one statement, so one round trip and one
transaction, one commit), and hands each request its own row back. While that batch is
in flight, new operations queue up and go together in the next one: under load a batch
carries as many operations as arrived during one round trip; alone, an operation is
sent at once (the runner wakes on the next turn of the event loop, no timer), so an
unloaded request waits no longer than before.

`LEDGER_BATCH_DEPTH` (default 1) lets a lane keep more than one batch in flight, each
on a connection of its own: a further batch starts while one is in the database once
as many operations wait as that batch carries. Two batches of one lane then run side by
side on the database's cores; on one account the second waits for the first's row lock
and decides under it, as the first left the account (so nothing overspends, and within
each batch the order of arrival still decides). On the 2-core development machine a
depth of 2 was slower (smaller batches, more database CPU per operation: see
docs/scaling.md), so the default keeps one batch in flight per lane.

Each operation gets its own outcome (see the migration): the function never lets one
operation's refusal (insufficient funds, a frozen account, a stale price version) touch
another's. If the database refuses the batch as a whole (a trigger, a constraint, a
bug), the batch is rolled back and its operations are run again one by one, so only
the operation at fault fails. Deadlocks and serialization failures are retried; a
database that cannot be reached is `DatabaseUnavailable` (503) for every operation of
the batch (nothing or everything of it committed: the gateway's retry with the same
idempotency key then answers a replay).

The function is called through a raw psycopg connection in autocommit, as a prepared
statement: no SQLAlchemy, no per-request round trip.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

import msgspec
import psycopg
import structlog
from psycopg.rows import namedtuple_row
from psycopg.types.json import set_json_loads

from ledger.db import is_unreachable, retryable, sqlstate
from ledger.errors import DatabaseUnavailable
from ledger.metrics import HOLD_BATCH_SIZE

log = structlog.get_logger(__name__)

CALL = (
    "SELECT b.op_index, b.op_outcome, b.op_detail, (b.op_hold).* "
    "FROM ledger_hold_batch(CAST(%s AS jsonb)) AS b"
)
ATTEMPTS = 4
_encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder()


def _decode_json(data: str | bytes) -> Any:
    """jsonb as Python values, in C; json.loads for what msgspec refuses (a number beyond
    a float's range, which jsonb keeps as numeric), so the values are json.loads's."""
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)


class HoldBatcher:
    """Coalesces hold operations into `ledger_hold_batch` calls; `submit` answers one row."""

    def __init__(
        self, url: str, *, lanes: int = 1, depth: int = 1, max_batch: int = 200, connect_timeout: int = 5
    ) -> None:
        self.lanes = [
            Lane(url, depth=depth, max_batch=max_batch, connect_timeout=connect_timeout) for _ in range(lanes)
        ]

    async def submit(self, operation: dict[str, Any], account_id: str) -> Any:
        """Queue one operation in the lane of `account_id`; its row (op_index, op_outcome,
        op_detail, hold columns) once its batch has committed."""
        lane = self.lanes[zlib.crc32(account_id.encode()) % len(self.lanes)]
        return await lane.submit(operation)

    async def close(self) -> None:
        for lane in self.lanes:
            await lane.close()


class Lane:
    """A queue and `depth` connections: at most `depth` batches in flight, one per connection.

    A batch starts when none is in flight, or when the operations waiting are at least as
    many as every batch in flight (so a second batch is never a sliver that splits the
    next one in two). A batch takes everything queued when it starts (up to `max_batch`);
    when it has committed, its connection goes on with the queue on the same terms.
    """

    def __init__(self, url: str, *, depth: int = 1, max_batch: int, connect_timeout: int) -> None:
        self.url = url
        self.depth = depth
        self.max_batch = max_batch
        self.connect_timeout = connect_timeout
        self._reset(None)

    def _reset(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._pending: list[tuple[bytes, asyncio.Future[Any]]] = []
        self._conns: list[psycopg.AsyncConnection[Any] | None] = [None] * self.depth
        self._idle: list[int] = list(range(self.depth))  # connections (their index) with no batch
        self._flying: list[int] = []  # the size of each batch in the database
        self._starting = False  # a runner is about to take the queue
        self._runners: set[asyncio.Task[None]] = set()

    async def submit(self, operation: dict[str, Any]) -> Any:
        """Queue one operation and wait for its row (op_index, op_outcome, op_detail, hold columns)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (the old one's state is gone)
            self._reset(loop)
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((_encode(operation), future))
        self._dispatch()
        return await future

    async def close(self) -> None:
        """Let the queued operations finish, then close the connections."""
        while running := [task for task in self._runners if not task.done()]:
            await asyncio.shield(asyncio.gather(*running, return_exceptions=True))
        for index, conn in enumerate(self._conns):
            if conn is not None:
                await conn.close()
                self._conns[index] = None

    def _may_start(self) -> bool:
        """Whether what is queued should go to the database now (see the class)."""
        if not self._pending or self._starting:
            return False
        return not self._flying or len(self._pending) >= max(self._flying)

    def _dispatch(self) -> None:
        if self._idle and self._may_start():
            assert self._loop is not None
            self._starting = True  # it runs on the next turn of the loop: queued meanwhile, it joins
            runner = self._loop.create_task(self._run(self._idle.pop()))
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)

    async def _run(self, slot: int) -> None:
        self._starting = False
        try:
            while self._pending:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                self._flying.append(len(batch))
                try:
                    await self._apply(slot, batch)
                finally:
                    self._flying.remove(len(batch))
                if not self._may_start():
                    break
        except BaseException as error:  # cancelled (shutdown): nobody may wait forever
            failure = DatabaseUnavailable("the service is shutting down")
            for _, future in self._pending:
                if not future.done():
                    future.set_exception(failure)
            self._pending = []
            if not isinstance(error, Exception):
                raise
        finally:
            self._idle.append(slot)
            self._dispatch()  # what queued up behind a batch still in flight

    async def _apply(self, slot: int, batch: list[tuple[bytes, asyncio.Future[Any]]]) -> None:
        live = [item for item in batch if not item[1].done()]  # a cancelled request is left out
        if not live:
            return
        try:
            rows = await self._execute(slot, b"[" + b",".join(op for op, _ in live) + b"]")
        except Exception as error:
            if len(live) > 1 and not isinstance(error, DatabaseUnavailable):
                log.warning("holds.batch_split", size=len(live), sqlstate=sqlstate(error), error=str(error))
                for item in live:  # one failing operation never fails its neighbours
                    await self._apply(slot, [item])
                return
            for _, future in live:
                if not future.done():
                    future.set_exception(error)
            return
        HOLD_BATCH_SIZE.observe(len(live))
        for row in rows:
            operation, future = live[row.op_index]
            if row.op_outcome == "again":
                # An earlier operation of the batch has the same key or resolves the same hold:
                # this one is answered by the next batch, which sees that one's outcome.
                self._pending.append((operation, future))
            elif not future.done():
                future.set_result(row)

    async def _connection(self, slot: int) -> psycopg.AsyncConnection[Any]:
        conn = self._conns[slot]
        if conn is None or conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, row_factory=namedtuple_row, connect_timeout=self.connect_timeout
            )
            # The hold's jsonb columns, decoded in C (the same values as json.loads gives).
            set_json_loads(_decode_json, conn)
            self._conns[slot] = conn
        return conn

    async def _execute(self, slot: int, payload: bytes) -> list[Any]:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                conn = await self._connection(slot)
                cursor = await conn.execute(CALL, (payload.decode(),), prepare=True)
                return await cursor.fetchall()
            except (psycopg.Error, OSError) as error:
                broken = self._conns[slot]
                if broken is not None and (broken.broken or broken.closed):
                    self._conns[slot] = None
                if is_unreachable(error) and not retryable(error):
                    raise DatabaseUnavailable("the database cannot be reached") from error
                if retryable(error) and attempt < ATTEMPTS:
                    log.info("holds.batch_retry", sqlstate=sqlstate(error), attempt=attempt)
                    await asyncio.sleep(0.002 * attempt)
                    continue
                raise
        raise AssertionError("unreachable")
