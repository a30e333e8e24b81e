"""Is an answered commit on two machines? The primary's synchronous standby, watched.

A ledger that has told the gateway "held" or "settled" must not lose it with the primary.
With synchronous replication (pg_auto_failover's default with two or more nodes) a commit
is acknowledged only once a synchronous standby has it; when the primary has none (the
standby is down, or pg_auto_failover switched synchronous replication off to keep
writing), an acknowledged commit is on one machine only. This module says which.

One `ReplicationWatch` per serving process: a background task reads the database's state
every `interval` seconds on one pooled connection and keeps the answer. Requests only
read the kept value (`sync_standby`, `require`), never the database, so the check costs
the hot path an attribute read. Invariants:

- `sync_standby` is True only when the last read succeeded, less than `stale_after`
  seconds ago, and found a primary with `synchronous_standby_names` set, a
  `synchronous_commit` that waits for a standby (`on`, `remote_write`, `remote_apply`) and
  a streaming standby in `sync` or `quorum` state. A role that may not read
  `pg_stat_replication`'s details (without `pg_read_all_stats`) sees only that WAL senders
  exist: then one streaming WAL sender with standby names set counts.
  Anything else, an unreachable database included, is False.
- `ledger_database_sync_standby` (gauge) is 1 or 0 accordingly, per process.
- `require()` raises `DatabaseDegraded` (503 `database_degraded`) when
  `LEDGER_REQUIRE_SYNC_STANDBY` is on and `sync_standby` is False; it never raises otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ledger.db import read_only
from ledger.errors import DatabaseDegraded
from ledger.metrics import DATABASE_SYNC_STANDBY

log = structlog.get_logger(__name__)

WAITING_COMMITS = frozenset({"on", "remote_write", "remote_apply"})
STATE = text(
    """
    SELECT pg_is_in_recovery() AS in_recovery,
           current_setting('synchronous_standby_names') AS standby_names,
           current_setting('synchronous_commit') AS synchronous_commit,
           pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS details_visible,
           (SELECT count(*) FROM pg_stat_replication
             WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming') AS sync_standbys,
           (SELECT count(*) FROM pg_stat_replication) AS wal_senders
    """
)


class ReplicationWatch:
    """Keeps whether the primary has a synchronous standby (see the module).

    `engine`: the pool to read through; `required`: LEDGER_REQUIRE_SYNC_STANDBY;
    `interval`: seconds between reads; `stale_after`: a last good read older than this
    counts as no standby.
    """

    def __init__(
        self, engine: AsyncEngine, *, required: bool, interval: float = 1.0, stale_after: float = 5.0
    ) -> None:
        self.engine = engine
        self.required = required
        self.interval = interval
        self.stale_after = stale_after
        self._found = False
        self._checked_at: float | None = None  # monotonic time of the last successful read
        self._state: dict[str, Any] = {}
        self._error: str | None = "not checked yet"
        self._task: asyncio.Task[None] | None = None

    @property
    def sync_standby(self) -> bool:
        if self._checked_at is None or time.monotonic() - self._checked_at > self.stale_after:
            return False
        return self._found

    def require(self) -> None:
        """Refuse (503 `database_degraded`) when a synchronous standby is required and missing."""
        if self.required and not self.sync_standby:
            raise DatabaseDegraded(
                "the database has no synchronous standby: money movements are refused until one is back "
                "(LEDGER_REQUIRE_SYNC_STANDBY=1)"
            )

    def status(self) -> dict[str, Any]:
        """What /readyz shows: the kept answer and what it was read from."""
        age = None if self._checked_at is None else round(time.monotonic() - self._checked_at, 3)
        body: dict[str, Any] = {
            "sync_standby": self.sync_standby,
            "required": self.required,
            "age_seconds": age,
        }
        body.update(self._state)
        if self._error is not None:
            body["error"] = self._error
        return body

    async def refresh(self) -> bool:
        """Read the state once; the new `sync_standby`."""
        try:
            async with read_only(self.engine) as conn:
                row = (await conn.execute(STATE)).one()
        except Exception as error:  # whatever it is, the answer is "not known to be safe"
            self._found, self._error = False, f"{type(error).__name__}: {error}".splitlines()[0]
            DATABASE_SYNC_STANDBY.set(0)
            return False
        streaming = row.sync_standbys if row.details_visible else row.wal_senders
        found = (
            not row.in_recovery
            and bool(row.standby_names.strip())
            and row.synchronous_commit in WAITING_COMMITS
            and streaming > 0
        )
        if found != self._found or self._checked_at is None:
            # A standby lost, or one configured but absent, is a warning; a database that was
            # never replicated (standby names unset: a single node, the embedded one included)
            # is stated once at info unless LEDGER_REQUIRE_SYNC_STANDBY makes it refuse writes.
            alarming = not found and (self.required or self._found or bool(row.standby_names.strip()))
            (log.warning if alarming else log.info)(
                "database.sync_standby",
                sync_standby=found,
                standby_names=row.standby_names,
                synchronous_commit=row.synchronous_commit,
            )
        self._found, self._checked_at, self._error = found, time.monotonic(), None
        self._state = {
            "synchronous_commit": row.synchronous_commit,
            "synchronous_standby_names": row.standby_names,
            "in_recovery": row.in_recovery,
        }
        DATABASE_SYNC_STANDBY.set(1 if found else 0)
        return found

    async def run(self) -> None:
        """Refresh every `interval` seconds until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def start(self) -> None:
        """The first read (so the first request finds an answer), then the background task."""
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
