"""Background jobs inside `ledger serve` when it runs on the embedded database.

The same actors as production run on Dramatiq's in-memory StubBroker, consumed by
a Dramatiq Worker on threads of this process, and the same leader-elected
schedule fires them from an in-process BackgroundScheduler. So an embedded
service reconciles orphaned holds, checks integrity and refreshes prices with no
Redis and no other process. Defaults suited to development (see
`ledger.settings`): a reconcile tick every 5 s and a 5 s grace.

Messages live in memory: a tick that is queued when the process stops is simply
not run, and the next start's ticks do its work (every job scans the database).
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
STOP_TIMEOUT_MS = 10_000


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

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.stop()
            self._scheduler = None
        if self._worker is not None:
            self._worker.stop(timeout=STOP_TIMEOUT_MS)
            self._worker = None
        runtime.shutdown()
        log.info("embedded_jobs.stopped")
