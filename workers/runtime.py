"""A per-process event loop for the actors, and the engine cached on it.

Dramatiq actors are synchronous and run on worker threads; the ledger's services
are async. Each process keeps one event loop on a daemon thread and one
`AsyncEngine` per database URL bound to that loop, so actor calls share a
connection pool instead of opening an engine (and a loop) per message. A forked
process (Dramatiq's worker processes) gets a fresh runtime: a loop and its
connections are never shared across processes.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from ledger.db import make_engine

T = TypeVar("T")

POOL_SIZE = 4
MAX_OVERFLOW = 4


class Runtime:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._engines: dict[str, AsyncEngine] = {}  # touched only on the loop's thread
        self._thread = threading.Thread(target=self._loop.run_forever, name="ledger-jobs-loop", daemon=True)
        self._thread.start()

    def _engine(self, url: str) -> AsyncEngine:
        engine = self._engines.get(url)
        if engine is None:
            engine = make_engine(url, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW)
            self._engines[url] = engine
        return engine

    def call(self, url: str, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
        """Run `work(engine)` on the runtime's loop and wait for its result (from any thread)."""

        async def runner() -> T:
            return await work(self._engine(url))

        future = asyncio.run_coroutine_threadsafe(runner(), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. Dramatiq's TimeLimit interrupted the waiting thread
            raise

    def close(self, timeout: float = 10.0) -> None:
        async def dispose() -> None:
            for engine in self._engines.values():
                await engine.dispose()
            self._engines.clear()

        if self._loop.is_running():
            # A job still holding a connection past the timeout is abandoned with the daemon loop thread.
            with suppress(TimeoutError):
                asyncio.run_coroutine_threadsafe(dispose(), self._loop).result(timeout=timeout)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=timeout)
        if not self._loop.is_running():
            self._loop.close()


_lock = threading.Lock()
_current: tuple[int, Runtime] | None = None


def runtime() -> Runtime:
    """This process's runtime, started on first use."""
    global _current
    with _lock:
        if _current is None or _current[0] != os.getpid():
            _current = (os.getpid(), Runtime())
        return _current[1]


def shutdown(timeout: float = 10.0) -> None:
    global _current
    with _lock:
        if _current is not None and _current[0] == os.getpid():
            _current[1].close(timeout)
        _current = None
