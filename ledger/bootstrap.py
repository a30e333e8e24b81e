"""What `ledger serve` does at start beyond serving.

- On an empty database (no price version at all) it publishes the bundled price
  sheets as the first version, so a new install can quote and reserve at once.
- In embedded mode it runs the background jobs in-process (see `workers.embedded`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from litestar import Litestar

from ledger.context import Actor
from ledger.metrics import mark_process_dead, multiprocess_dir
from ledger.prices.service import PriceService
from ledger.settings import Settings
from pricing.bundled import bundled_document

log = structlog.get_logger(__name__)

SEEDER = Actor(identity="bootstrap", role="admin")


async def seed_prices(app: Litestar) -> None:
    prices: PriceService = app.state.prices
    version = await prices.seed_if_empty(bundled_document(), SEEDER)
    if version is not None:
        log.info("prices.seeded", version=version.version, models=version.models)


async def forget_metrics(app: Litestar) -> None:
    """A serving process that exits marks its metric files dead (multiprocess mode only)."""
    mark_process_dead()


Hooks = list[Callable[..., Any]]


def startup_hooks(settings: Settings, database_url: str) -> tuple[Hooks, Hooks]:
    on_startup: Hooks = [seed_prices]
    on_shutdown: Hooks = [forget_metrics] if multiprocess_dir() else []
    if settings.embedded:
        from workers.embedded import EmbeddedJobs

        jobs = EmbeddedJobs(settings, database_url)

        async def start_jobs(app: Litestar) -> None:
            jobs.start()

        async def stop_jobs(app: Litestar) -> None:
            await asyncio.to_thread(jobs.stop, float(settings.shutdown_grace_seconds))

        on_startup.append(start_jobs)
        on_shutdown.append(stop_jobs)
    return on_startup, on_shutdown
