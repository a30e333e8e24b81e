"""PostgreSQL advisory locks: scheduler leadership and per-job overlap.

Both are session-level locks taken with `pg_try_advisory_lock` (never waiting) on a
dedicated autocommit connection, so the lock lives exactly as long as that
connection: a process that dies, or whose connection drops, loses the lock at once
and a standby takes over. Advisory locks are per database, so deployments (and test
databases) on one server never contend.

Keys are the two-int form (namespace, id): namespace 0x4C454447 ("LEDG"), id 0 for
the scheduler leader and 1.. for the jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
import structlog

from ledger.database_url import conninfo

log = structlog.get_logger(__name__)

NAMESPACE = 0x4C454447
LEADER = 0
JOB_KEYS = {
    "reconcile": 1,
    "refresh_prices": 2,
    "check_integrity": 3,
    "expire_grants": 4,
    "deliver_alerts": 5,
}
CONNECT_TIMEOUT = 5


def _connect(database_url: str, purpose: str) -> psycopg.Connection[Any]:
    return psycopg.connect(
        conninfo(database_url),
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT,
        application_name=f"ledger-{purpose}",
    )


class AdvisoryLock:
    """A session-level advisory lock on its own connection.

    `try_acquire()` never blocks; `still_held()` checks that the connection (and so the
    lock) is alive; `release()` unlocks and closes the connection.
    """

    def __init__(self, database_url: str, key: int, *, purpose: str) -> None:
        self.database_url = database_url
        self.key = key
        self.purpose = purpose
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    def try_acquire(self) -> bool:
        if self._conn is not None:
            return True
        try:
            conn = _connect(self.database_url, self.purpose)
        except psycopg.Error as error:
            log.warning("lock.connect_failed", purpose=self.purpose, error=str(error))
            return False
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (NAMESPACE, self.key)).fetchone()
        except psycopg.Error as error:
            log.warning("lock.failed", purpose=self.purpose, error=str(error))
            conn.close()
            return False
        if not row or not row[0]:
            conn.close()
            return False
        self._conn = conn
        return True

    def still_held(self) -> bool:
        """False once the connection is gone: the server has released the lock."""
        if self._conn is None:
            return False
        try:
            self._conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            self._drop()
            return False

    def release(self) -> None:
        if self._conn is None:
            return
        with suppress(psycopg.Error):  # closing the connection below releases it anyway
            self._conn.execute("SELECT pg_advisory_unlock(%s, %s)", (NAMESPACE, self.key))
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(psycopg.Error):
                conn.close()


def leader_lock(database_url: str) -> AdvisoryLock:
    return AdvisoryLock(database_url, LEADER, purpose="scheduler-leader")


@contextmanager
def job_lock(database_url: str, job: str) -> Iterator[bool]:
    """Hold the job's overlap lock for the block; yields False (and holds nothing) if it is taken."""
    lock = AdvisoryLock(database_url, JOB_KEYS[job], purpose=f"job-{job}")
    acquired = lock.try_acquire()
    try:
        yield acquired
    finally:
        lock.release()
