"""Background jobs inside `ledger serve` when it runs on the embedded database.

The same actors as production run on Dramatiq's in-memory StubBroker, consumed by
a Dramatiq Worker on threads of this process, and the same leader-elected
schedule fires them from an in-process BackgroundScheduler. So an embedded
service reconciles orphaned holds, checks integrity and refreshes prices with no
Redis and no other process. Defaults suited to development (see
`ledger.settings`): a reconcile tick every 5 s and a 5 s grace.

Messages live in memory: a tick that is queued when the process stops is simply
not run, and the next start's ticks do its work (every job scans the database).

Stopping is bounded (`stop(timeout)`, LEDGER_SHUTDOWN_GRACE_SECONDS from `ledger serve`):
a job still running after that is abandoned with the process. That is safe because
every job commits in whole transactions (a reconcile batch, a price version, a
job_runs row): a connection that closes mid-transaction rolls it back.
"""

from __future__ import annotations

import dramatiq
import structlog

from ledger.settings import Settings
from workers import runtime
from workers.actors import JobContext, register_actors
from workers.broker import setup_broker
from workers.scheduler import LeaderScheduler, enqueuer

log = structlog.get_logger(__name__)

WORKER_THREADS = 2
STOP_TIMEOUT_SECONDS = 3.0


class EmbeddedJobs:
    def __init__(
        self, settings: Settings, database_url: str, *, standby_seconds: float | None = None
    ) -> None:
        if not settings.embedded:
            raise ValueError(
                "embedded jobs run only without LEDGER_DATABASE_URL (use ledger worker/scheduler)"
            )
        self.settings = settings
        self.database_url = database_url
        self.standby_seconds = standby_seconds
        self._worker: dramatiq.Worker | None = None
        self._scheduler: LeaderScheduler | None = None

    def start(self) -> None:
        broker = setup_broker(self.settings)  # the StubBroker
        actors = register_actors(broker, JobContext(self.settings, self.database_url, trigger="embedded"))
        worker = dramatiq.Worker(broker, worker_threads=WORKER_THREADS, worker_timeout=200)
        worker.start()
        self._worker = worker
        kwargs = {} if self.standby_seconds is None else {"standby_seconds": self.standby_seconds}
        scheduler = LeaderScheduler(self.settings, self.database_url, enqueuer(actors), **kwargs)
        scheduler.start()
        self._scheduler = scheduler
        log.info(
            "embedded_jobs.started",
            reconcile_every=self.settings.reconcile_interval_seconds or None,
            grace_seconds=self.settings.reconcile_grace_seconds,
        )

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop firing, let a running job finish for up to `timeout` seconds in all, then return."""
        if self._scheduler is not None:
            self._scheduler.stop(timeout=min(timeout, 1.0))
            self._scheduler = None
        if self._worker is not None:
            # Dramatiq joins its worker threads, then its consumer threads, each with this
            # timeout: half of the budget each keeps the whole stop within `timeout`.
            self._worker.stop(timeout=max(int(timeout * 1000 / 2), 1))
            self._worker = None
        runtime.shutdown(timeout=timeout)
        log.info("embedded_jobs.stopped")
