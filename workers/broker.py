"""The Dramatiq broker: Redis in production, the in-memory stub in embedded mode.

`setup_broker(settings)` is the one way to get a broker. It is idempotent: the same
settings (mode and Redis URL) give the same broker object in one process, which
is also installed as Dramatiq's global broker. Its middleware:

- `AgeLimit(max_age=MAX_AGE_MS)`: a scheduled tick that waited longer than this in
  the queue is dropped; the next tick does the same work (every job is idempotent);
- `TimeLimit(time_limit=TIME_LIMIT_MS)`: a job running longer is interrupted. A
  reconcile batch that is interrupted rolls back whole;
- `ShutdownNotifications`, `Callbacks`, `Pipelines`: Dramatiq's defaults;
- `Retries(max_retries=MAX_RETRIES, ...)`: a failed job is retried with backoff;
- `LogContext`: binds `actor_name` and `message_id` into structlog's contextvars for
  every line logged while a message is processed.
"""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import structlog
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    Middleware,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

from ledger.settings import Settings, SettingsError

QUEUE = "ledger"
MAX_AGE_MS = 15 * 60_000
TIME_LIMIT_MS = 10 * 60_000
MAX_RETRIES = 3
MIN_BACKOFF_MS = 5_000
MAX_BACKOFF_MS = 5 * 60_000
STUB = "stub"


class LogContext(Middleware):
    """Bind `actor_name` and `message_id` into structlog contextvars while a message runs.

    Parameters: none. The binding is made on the worker thread that processes the
    message (contextvars are per thread) and removed when the message is done or
    skipped, so a thread never carries one message's context into the next.
    """

    KEYS = ("actor_name", "message_id")

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        structlog.contextvars.bind_contextvars(actor_name=message.actor_name, message_id=message.message_id)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        structlog.contextvars.unbind_contextvars(*self.KEYS)

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        structlog.contextvars.unbind_contextvars(*self.KEYS)


def middleware() -> list[Middleware]:
    return [
        AgeLimit(max_age=MAX_AGE_MS),
        TimeLimit(time_limit=TIME_LIMIT_MS),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Retries(max_retries=MAX_RETRIES, min_backoff=MIN_BACKOFF_MS, max_backoff=MAX_BACKOFF_MS),
        LogContext(),
    ]


def broker_key(settings: Settings) -> str:
    """Which broker these settings mean: the stub in embedded mode, else the Redis URL."""
    if settings.embedded:
        return STUB
    if not settings.redis_url:
        raise SettingsError(
            "LEDGER_REDIS_URL is required when LEDGER_DATABASE_URL is set (e.g. redis://host:6379/0)"
        )
    return settings.redis_url


_lock = threading.Lock()
_brokers: dict[str, dramatiq.Broker] = {}


def setup_broker(settings: Settings, *, process_boot: bool = True) -> dramatiq.Broker:
    """The broker for these settings, created once per process and installed globally.

    `process_boot` emits Dramatiq's process_boot event (it starts the TimeLimit
    watcher) when the broker is created; the `dramatiq` command line does that itself
    in each worker process, so `workers.process.boot` passes False.
    """
    key = broker_key(settings)
    with _lock:
        broker = _brokers.get(key)
        if broker is None:
            if key == STUB:
                broker = StubBroker(middleware=middleware())
            else:
                broker = RedisBroker(url=key, middleware=middleware())  # type: ignore[no-untyped-call]
            if process_boot:
                broker.emit_after("process_boot")
            _brokers[key] = broker
        dramatiq.set_broker(broker)
        return broker


def forget_broker(settings: Settings) -> None:
    """Close and drop the broker for these settings (tests and embedded shutdown)."""
    with _lock:
        broker = _brokers.pop(broker_key(settings), None)
    if broker is not None:
        broker.close()
