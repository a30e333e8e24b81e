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
idempotency key then answers a replay). A connection that turns out to be on a standby
(SQLSTATE 25006, as after a failover with a URL that does not ask for a primary) is
treated as lost: 503, and the next batch connects again, through the URL's host list.

The function is called through a raw psycopg connection in autocommit, as a prepared
statement: no SQLAlchemy, no per-request round trip.

`LEDGER_BATCH_PIPELINE` (default 2; with a depth of 1) puts the lane's one connection in
libpq's pipeline mode (`PipelineLane`): the next batch may be sent while one is still
in the database, on the same connection, each batch its own sync point (so its own
transaction and commit). The backend still runs them one after the other, so the
second never competes for a core or a row lock with the first; what it saves is the
backend's wait for the next batch while the first one's result travels back to the
event loop and the next is sent (about 12 % of its time at the peak, measured: see
docs/scaling.md). A batch is sent early only once as many operations wait as the batch
in flight carries and at least half the lane's recent peak of outstanding operations,
so the early batch is never a sliver. A pipeline of 1 is the plain `Lane`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import zlib
from collections import deque, namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import psycopg
import structlog
from psycopg import abc, pq
from psycopg.adapt import Transformer
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
PREPARED = b"ledger_hold_batch_call"  # the pipelined lane's statement (PipelineLane)
PREPARE = (
    "PREPARE ledger_hold_batch_call (jsonb) AS "
    "SELECT b.op_index, b.op_outcome, b.op_detail, (b.op_hold).* FROM ledger_hold_batch($1) AS b"
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
        self,
        url: str,
        *,
        lanes: int = 1,
        depth: int = 1,
        pipeline: int = 2,
        max_batch: int = 200,
        connect_timeout: int = 5,
    ) -> None:
        self.lanes: list[Lane | PipelineLane] = []
        for _ in range(lanes):
            if depth == 1 and pipeline > 1:
                self.lanes.append(
                    PipelineLane(url, pipeline=pipeline, max_batch=max_batch, connect_timeout=connect_timeout)
                )
            else:
                self.lanes.append(
                    Lane(url, depth=depth, max_batch=max_batch, connect_timeout=connect_timeout)
                )

    async def submit(self, operation: dict[str, Any], account_id: str) -> Any:
        """Queue one operation in the lane of `account_id`; its row (op_index, op_outcome,
        op_detail, hold columns) once its batch has committed."""
        lane = self.lanes[zlib.crc32(account_id.encode()) % len(self.lanes)]
        return await lane.submit(operation)

    async def close(self) -> None:
        for lane in self.lanes:
            await lane.close()


Item = tuple[bytes, "asyncio.Future[Any]"]


class _Queue:
    """What both lanes share: a queue of encoded operations, each with its request's future."""

    _loop: asyncio.AbstractEventLoop | None
    _pending: list[Item]

    def _reset(self, loop: asyncio.AbstractEventLoop | None) -> None:
        raise NotImplementedError

    def _queued(self) -> None:
        """An operation was queued: start a batch if the lane's rule says so."""
        raise NotImplementedError

    async def submit(self, operation: dict[str, Any]) -> Any:
        """Queue one operation and wait for its row (op_index, op_outcome, op_detail, hold columns)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (the old one's state is gone)
            self._reset(loop)
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((_encode(operation), future))
        self._queued()
        return await future

    def _answer(self, items: list[Item], rows: list[Any]) -> None:
        """Give each operation of a committed batch its row; one the batch answered "again" is
        queued anew: an earlier operation of the batch has the same key or resolves the same
        hold, so it is answered by a batch sent after that one committed."""
        HOLD_BATCH_SIZE.observe(len(items))
        for row in rows:
            operation, future = items[row.op_index]
            if row.op_outcome == "again":
                self._pending.append((operation, future))
            elif not future.done():
                future.set_result(row)


class Lane(_Queue):
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
        self._pending: list[Item] = []
        self._conns: list[psycopg.AsyncConnection[Any] | None] = [None] * self.depth
        self._idle: list[int] = list(range(self.depth))  # connections (their index) with no batch
        self._flying: list[int] = []  # the size of each batch in the database
        self._starting = False  # a runner is about to take the queue
        self._runners: set[asyncio.Task[None]] = set()

    def _queued(self) -> None:
        self._dispatch()

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

    async def _apply(self, slot: int, batch: list[Item]) -> None:
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
        self._answer(live, rows)

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
                if broken is not None and (broken.broken or broken.closed or is_unreachable(error)):
                    self._conns[slot] = None  # lost, or on a standby (25006): the next batch reconnects
                    if not broken.closed:
                        await broken.close()
                if is_unreachable(error) and not retryable(error):
                    raise DatabaseUnavailable("the database cannot be reached") from error
                if retryable(error) and attempt < ATTEMPTS:
                    log.info("holds.batch_retry", sqlstate=sqlstate(error), attempt=attempt)
                    await asyncio.sleep(0.002 * attempt)
                    continue
                raise
        raise AssertionError("unreachable")


class _Batch:
    """Operations sent together (one sync point: one transaction), and what came back."""

    __slots__ = ("attempt", "error", "items", "rows")

    def __init__(self, items: list[Item], attempt: int = 1) -> None:
        self.items = items
        self.attempt = attempt
        self.rows: list[Any] | None = None
        self.error: psycopg.Error | None = None


class PipelineLane(_Queue):
    """A queue and one connection in pipeline mode: up to `pipeline` batches in flight on it.

    The first batch goes as soon as something is queued (on the next turn of the event
    loop, so what is submitted together travels together). Another is sent while batches
    are in flight, up to `pipeline` of them, once the operations waiting are at least as
    many as the last batch sent carries and at least half the lane's recent peak of
    outstanding operations (a decaying maximum). A batch takes everything queued (up to
    `max_batch`). Results are read by a reader callback on the connection's socket, in
    the order the batches were sent.

    A batch the database refuses as a whole is retried (deadlock, serialization failure:
    up to ATTEMPTS times, 2 ms x attempt apart) or split into batches of one operation,
    as the plain `Lane` does; a lost connection is `DatabaseUnavailable` for every batch
    in flight (each committed whole or not at all), and the next batch connects again.
    """

    def __init__(self, url: str, *, pipeline: int = 2, max_batch: int, connect_timeout: int) -> None:
        self.url = url
        self.pipeline = pipeline
        self.max_batch = max_batch
        self.connect_timeout = connect_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._reset(None)

    def _reset(self, loop: asyncio.AbstractEventLoop | None) -> None:
        if self._conn is not None:  # a connection of an event loop that is gone: drop it
            self._conn.pgconn.finish()
        self._loop = loop
        self._conn = None
        self._pg: pq.abc.PGconn | None = None
        self._fd = -1  # the connection's socket, as registered with the loop (libpq forgets it once lost)
        self._transformer: abc.Transformer | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._pending: list[Item] = []
        self._ready: deque[_Batch] = deque()  # retried or split batches: sent before the queue
        self._flying: deque[_Batch] = deque()  # sent, in order; results come back in this order
        self._retries = 0  # batches waiting out a retry delay
        self._scheduled = False  # a pump is due on the next turn of the loop
        self._writing = False  # a writer callback flushes what libpq could not send at once
        self._peak = 0.0
        self._drained: list[asyncio.Future[None]] = []
        self._row_types: dict[tuple[str, ...], Callable[[Sequence[Any]], Any]] = {}

    def _queued(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._pump)

    @property
    def in_flight(self) -> int:
        """Batches sent on the connection and not yet answered."""
        return len(self._flying)

    async def close(self) -> None:
        """Let the queued and flying batches finish, then close the connection."""
        if self._loop is None or self._loop is not asyncio.get_running_loop():
            return
        if self._busy():
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._drained.append(waiter)
            await waiter
        if self._conn is not None:
            self._drop_connection()

    def _busy(self) -> bool:
        return bool(
            self._pending
            or self._ready
            or self._flying
            or self._retries
            or self._connecting
            or self._scheduled
        )

    def _check_drained(self) -> None:
        if self._drained and not self._busy():
            for waiter in self._drained:
                if not waiter.done():
                    waiter.set_result(None)
            self._drained = []

    # --- sending -------------------------------------------------------------------

    def _pump(self) -> None:
        """Send what should go now (see the class); connect first if there is no connection."""
        self._scheduled = False
        try:
            if self._pending or self._ready:
                if self._pg is None:
                    if self._connecting is None:
                        assert self._loop is not None
                        self._connecting = self._loop.create_task(self._connect())
                    return
                while self._ready and self._pg is not None:
                    self._send(self._ready.popleft())
                while self._pg is not None and self._may_send():
                    batch = self._pending[: self.max_batch]
                    del self._pending[: self.max_batch]
                    live = [item for item in batch if not item[1].done()]  # a cancelled request is left out
                    if live:
                        self._send(_Batch(live))
        finally:
            self._check_drained()

    def _may_send(self) -> bool:
        if not self._pending or self._retries:
            # While a refused batch waits out its retry delay, later operations wait too: they
            # go after it, as they arrived (the batches already in flight are decided before it).
            return False
        if not self._flying:
            return True
        outstanding = len(self._pending) + sum(len(batch.items) for batch in self._flying)
        self._peak = max(self._peak * 0.995, outstanding)
        return (
            len(self._flying) < self.pipeline
            and len(self._pending) >= len(self._flying[-1].items)
            and 2 * len(self._pending) >= self._peak
        )

    def _send(self, batch: _Batch) -> None:
        pg = self._pg
        assert pg is not None
        payload = b"[" + b",".join(op for op, _ in batch.items) + b"]"
        try:
            pg.send_query_prepared(PREPARED, [payload])
            pg.pipeline_sync()
            self._flying.append(batch)
            if pg.flush() and not self._writing:
                assert self._loop is not None
                self._writing = True
                self._loop.add_writer(self._fd, self._on_writable)
        except psycopg.Error as error:
            if batch not in self._flying:
                self._flying.append(batch)
            self._lost(error)

    def _on_writable(self) -> None:
        pg = self._pg
        try:
            if pg is None or not pg.flush():
                self._stop_writing()
        except psycopg.Error as error:
            self._lost(error)
            return
        # A flush that would block reads what the server sent meanwhile into libpq's
        # buffer (so neither side waits on the other): results there wake no reader.
        self._on_readable()

    def _stop_writing(self) -> None:
        if self._writing and self._loop is not None and self._pg is not None:
            self._loop.remove_writer(self._fd)
        self._writing = False

    async def _connect(self) -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=self.connect_timeout
            )
            try:
                set_json_loads(_decode_json, conn)  # the hold's jsonb columns, decoded in C
                await conn.execute(PREPARE)
                pg = conn.pgconn
                pg.nonblocking = 1
                pg.enter_pipeline_mode()
            except BaseException:
                await conn.close()
                raise
        except Exception as error:
            failure: Exception = error
            if is_unreachable(error):
                failure = DatabaseUnavailable("the database cannot be reached")
                failure.__cause__ = error
            log.warning("holds.lane_connect_failed", error=str(error))
            self._fail(self._pending + [item for batch in self._ready for item in batch.items], failure)
            self._pending = []
            self._ready.clear()
            return
        finally:
            self._connecting = None
            self._check_drained()
        assert self._loop is not None
        self._conn, self._pg, self._fd = conn, pg, pg.socket
        self._transformer = Transformer(conn)
        self._loop.add_reader(self._fd, self._on_readable)
        self._pump()

    # --- receiving -----------------------------------------------------------------

    def _on_readable(self) -> None:
        pg = self._pg
        if pg is None:
            return
        try:
            pg.consume_input()
            while self._flying and not pg.is_busy():
                result = pg.get_result()
                if result is None:  # the end of one statement's results
                    continue
                status = result.status
                batch = self._flying[0]
                if status == pq.ExecStatus.TUPLES_OK:
                    batch.rows = self._rows(result)
                elif status == pq.ExecStatus.PIPELINE_SYNC:
                    self._finish(batch)  # still in flight if it raises: _lost answers what it left
                    self._flying.popleft()
                elif status != pq.ExecStatus.PIPELINE_ABORTED:
                    batch.error = psycopg.errors.error_from_result(result)
                    if is_unreachable(batch.error):  # the server is going away (a shutdown, a crash)
                        self._lost(batch.error)
                        return
        except Exception as error:  # whatever it is, no request may wait for results nobody reads
            self._lost(error)
            return
        if pg.status == pq.ConnStatus.BAD:
            self._lost(psycopg.OperationalError("the connection to the database was lost"))
            return
        self._pump()

    def _rows(self, result: pq.abc.PGresult) -> list[Any]:
        assert self._transformer is not None
        names = tuple((result.fname(i) or b"").decode() for i in range(result.nfields))
        make = self._row_types.get(names)
        if make is None:
            make = self._row_types[names] = namedtuple("Row", names)._make  # type: ignore[attr-defined]
        self._transformer.set_pgresult(result)
        return self._transformer.load_rows(0, result.ntuples, make)

    def _finish(self, batch: _Batch) -> None:
        live = [item for item in batch.items if not item[1].done()]
        error = batch.error
        if error is None and batch.rows is not None:
            self._answer(batch.items, batch.rows)
            return
        if error is None:
            error = psycopg.InternalError("the batch returned no rows")
        if not live:
            return
        if retryable(error) and batch.attempt < ATTEMPTS:
            log.info("holds.batch_retry", sqlstate=sqlstate(error), attempt=batch.attempt)
            assert self._loop is not None
            self._retries += 1
            self._loop.call_later(0.002 * batch.attempt, self._retry, _Batch(live, batch.attempt + 1))
        elif len(live) > 1:
            log.warning("holds.batch_split", size=len(live), sqlstate=sqlstate(error), error=str(error))
            self._ready.extend(
                _Batch([item]) for item in live
            )  # one failing operation never fails its neighbours
        else:
            self._fail(live, error)

    def _retry(self, batch: _Batch) -> None:
        self._retries -= 1
        self._ready.append(batch)
        self._pump()

    # --- failure -------------------------------------------------------------------

    def _lost(self, error: Exception) -> None:
        """The connection is gone: every batch in flight is 503 (each committed whole or not at all)."""
        log.warning("holds.lane_connection_lost", in_flight=len(self._flying), error=str(error))
        failure = DatabaseUnavailable("the database cannot be reached")
        failure.__cause__ = error
        self._fail([item for batch in self._flying for item in batch.items], failure)
        self._flying.clear()
        self._drop_connection()
        if self._pending or self._ready:  # the next batch connects again
            assert self._loop is not None
            self._scheduled = True
            self._loop.call_soon(self._pump)
        self._check_drained()

    def _drop_connection(self) -> None:
        with contextlib.suppress(Exception):  # never raises: a lost socket, a closed loop
            self._stop_writing()
            if self._pg is not None and self._loop is not None:
                self._loop.remove_reader(self._fd)
        self._writing = False
        if self._conn is not None:
            self._conn.pgconn.finish()
        self._conn, self._pg, self._transformer, self._fd = None, None, None, -1

    @staticmethod
    def _fail(items: list[Item], error: Exception) -> None:
        for _, future in items:
            if not future.done():
                future.set_exception(error)
