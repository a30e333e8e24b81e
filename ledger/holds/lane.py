"""A lane of the group commit: one connection in libpq's pipeline mode, its queue, its batches.

Each request's operation is queued with its future; a batch (everything queued, up to
`max_batch`) is sent as ONE prepared call of `ledger_hold_batch` (one statement: one
transaction, one commit) and each request gets its own row back. Up to `pipeline`
batches (`LEDGER_BATCH_PIPELINE`) are in flight on the one connection, each its own
sync point (its own transaction); the backend runs them one after the other, so two
batches of a lane never compete for a row lock or a core.

Invariants:
- results come back in the order the batches were sent, and each operation is answered
  exactly once (its row, or an exception);
- an operation the batch answers "again" (an earlier operation of the same batch has
  its key or resolves its hold) is queued anew and answered by a later batch;
- a batch the database refuses as a whole is retried (deadlock, serialization failure)
  or split into batches of one, so only the operation at fault fails;
- a lost connection is `DatabaseUnavailable` (503) for every batch in flight (each
  committed whole or not at all); the next batch connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque, namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import psycopg
import structlog
from psycopg import abc, pq
from psycopg.adapt import Transformer
from psycopg.types.json import set_json_loads

from ledger.db import is_unreachable, retryable, sqlstate
from ledger.errors import DatabaseUnavailable
from ledger.metrics import HOLD_BATCH_SIZE

log = structlog.get_logger(__name__)

PREPARED = b"ledger_hold_batch_call"
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


Item = tuple[bytes, "asyncio.Future[Any]"]


class _Batch:
    """Operations sent together (one sync point: one transaction), and what came back."""

    __slots__ = ("attempt", "error", "items", "rows")

    def __init__(self, items: list[Item], attempt: int = 1) -> None:
        self.items = items
        self.attempt = attempt
        self.rows: list[Any] | None = None
        self.error: psycopg.Error | None = None


class Lane:
    """A queue and one connection in pipeline mode: up to `pipeline` batches in flight on it.

    The first batch goes as soon as something is queued (on the next turn of the event
    loop, so what is submitted together travels together). Another is sent while batches
    are in flight, up to `pipeline` of them, once the operations waiting are at least as
    many as the last batch sent carries and at least half the lane's recent peak of
    outstanding operations (a decaying maximum). A batch takes everything queued (up to
    `max_batch`). Results are read by a reader callback on the connection's socket, in
    the order the batches were sent.

    A batch the database refuses as a whole is retried (deadlock, serialization failure:
    up to ATTEMPTS times, 2 ms x attempt apart) or split into batches of one operation;
    a lost connection is `DatabaseUnavailable` for every batch
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
        answered = set()
        for row in rows:
            answered.add(row.op_index)
            operation, future = items[row.op_index]
            if row.op_outcome == "again":
                self._pending.append((operation, future))
            elif not future.done():
                future.set_result(row)
        for index, (_, future) in enumerate(items):  # never left waiting: the function answers each
            if index not in answered and not future.done():
                future.set_exception(RuntimeError(f"ledger_hold_batch gave no row for operation {index}"))

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
