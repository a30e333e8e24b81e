"""The periodic schedule, fired by exactly one scheduler at a time.

- Leadership: a scheduler fires jobs only while it holds the PostgreSQL session-level
  advisory lock `workers.locks.LEADER` on its own connection. A second `ledger
  scheduler` (or a second embedded `ledger serve` on the same data folder) stays on
  standby and tries again every `STANDBY_SECONDS`; when the leader dies its
  connection closes, the server drops the lock, and a standby takes over at its
  next try. The leader checks its lock's connection at the same interval and stops
  firing as soon as it is lost.
- Overlap: APScheduler runs each job with `max_instances=1` and `coalesce=True`
  (ticks missed while busy collapse into one), and the job body itself takes a
  per-job advisory lock (`workers.actors.run_job`), so a tick whose previous run is
  still going, in any process, skips.
- Cron expressions (LEDGER_RECONCILE_CRON, LEDGER_PRICE_REFRESH_CRON,
  LEDGER_INTEGRITY_CRON, LEDGER_GRANT_EXPIRY_CRON) are read in UTC. LEDGER_RECONCILE_INTERVAL_SECONDS > 0
  replaces the reconcile cron with a fixed interval. `deliver_alerts` runs every
  LEDGER_ALERT_INTERVAL_SECONDS (default 10).
- Firing a job enqueues its actor (`actor.send()`). If the broker cannot be
  reached the failure is logged and counted; nothing is lost, because every job
  finds its work by scanning the database and the next tick does it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import Any

import structlog
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from ledger.metrics import JOB_EVENTS
from ledger.settings import Settings
from workers.locks import AdvisoryLock, leader_lock

log = structlog.get_logger(__name__)
logging.getLogger("apscheduler").setLevel(logging.WARNING)  # our own lines say what fired and why

STANDBY_SECONDS = 5.0
MISFIRE_GRACE_SECONDS = 30

Fire = Callable[[str], None]


def job_triggers(settings: Settings) -> dict[str, Any]:
    """Each job's APScheduler trigger; a malformed cron expression raises ValueError here, at start."""
    if settings.reconcile_interval_seconds > 0:
        reconcile: Any = IntervalTrigger(seconds=settings.reconcile_interval_seconds, timezone=UTC)
    else:
        reconcile = CronTrigger.from_crontab(settings.reconcile_cron, timezone=UTC)
    return {
        "reconcile": reconcile,
        "refresh_prices": CronTrigger.from_crontab(settings.price_refresh_cron, timezone=UTC),
        "check_integrity": CronTrigger.from_crontab(settings.integrity_cron, timezone=UTC),
        "expire_grants": CronTrigger.from_crontab(settings.grant_expiry_cron, timezone=UTC),
        "deliver_alerts": IntervalTrigger(seconds=settings.alert_interval_seconds, timezone=UTC),
    }


def enqueuer(actors: Mapping[str, Any]) -> Fire:
    """A `fire` that sends the job's actor; broker failures are logged, never raised into the scheduler."""

    def fire(job: str) -> None:
        try:
            message = actors[job].send()
        except Exception as error:
            JOB_EVENTS.labels(job, "enqueue_failed").inc()
            log.error("job.enqueue_failed", job=job, error=f"{type(error).__name__}: {error}")
            return
        log.debug("job.enqueued", job=job, message_id=message.message_id)

    return fire


class LeaderScheduler:
    """A BackgroundScheduler that runs only while this process holds the leader lock.

    `step()` is one round of the election (acquire, or check the lock is still held)
    and returns whether this process leads; `run()` repeats it until `stop()`.
    """

    def __init__(
        self, settings: Settings, database_url: str, fire: Fire, *, standby_seconds: float = STANDBY_SECONDS
    ) -> None:
        self.settings = settings
        self.fire = fire
        self.standby_seconds = standby_seconds
        self.lock: AdvisoryLock = leader_lock(database_url)
        self.triggers = job_triggers(settings)  # validates the cron expressions before anything runs
        self._scheduler: BackgroundScheduler | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._announced_standby = False

    @property
    def leading(self) -> bool:
        return self._scheduler is not None

    def step(self) -> bool:
        if self.lock.held and not self.lock.still_held():
            log.warning("scheduler.leadership_lost")
            self._stop_schedule()
        if not self.lock.held and self.lock.try_acquire():
            log.info("scheduler.leader", jobs=sorted(self.triggers))
            self._announced_standby = False
            self._start_schedule()
        if not self.lock.held and not self._announced_standby:
            log.info("scheduler.standby", retry_seconds=self.standby_seconds)
            self._announced_standby = True
        return self.lock.held

    def run(self) -> None:
        """Block, leading or standing by, until `stop()` is called."""
        try:
            while not self._stopping.is_set():
                self.step()
                self._stopping.wait(self.standby_seconds)
        finally:
            self._stop_schedule()
            self.lock.release()

    def start(self) -> None:
        """Run the election on a daemon thread (embedded mode)."""
        self._thread = threading.Thread(target=self.run, name="ledger-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        else:
            self._stop_schedule()
            self.lock.release()

    def _start_schedule(self) -> None:
        scheduler = BackgroundScheduler(timezone=UTC)
        for job, trigger in self.triggers.items():
            scheduler.add_job(
                self.fire,
                trigger,
                args=[job],
                id=job,
                name=job,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=MISFIRE_GRACE_SECONDS,
                replace_existing=True,
            )
        scheduler.start()
        self._scheduler = scheduler

    def _stop_schedule(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=False)
