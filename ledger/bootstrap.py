"""What `ledger serve` does at start beyond serving.

- On an empty database (no price version at all) it publishes what the price
  sources (`LEDGER_PRICE_SOURCES`, by default the bundled sheets) produce, exactly as
  `ledger prices refresh` would read them, as the first version, so a new install can
  quote and reserve at once. The seed counts as a refresh (its content hash is
  recorded), so the first refresh after start publishes nothing when the sources did
  not change. If the sources cannot be read, it seeds the bundled sheets instead.
- In embedded mode it runs the background jobs in-process (see `workers.embedded`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from litestar import Litestar

from ledger.context import Actor
from ledger.metrics import mark_process_dead, multiprocess_dir
from ledger.prices.service import PriceService
from ledger.prices.sources import SourceError, load_sources
from ledger.settings import Settings
from pricing.bundled import bundled_document
from pricing.document import PriceDocument
from pricing.errors import PriceDocumentInvalid

log = structlog.get_logger(__name__)

SEEDER = Actor(identity="bootstrap", role="admin")


def first_document(settings: Settings) -> PriceDocument:
    """What the refresh's sources produce now; the bundled sheets if they cannot be read."""
    try:
        return load_sources(settings.price_sources)
    except (SourceError, PriceDocumentInvalid, OSError) as error:
        log.warning("prices.sources_unreadable", error=str(error), seeding="the bundled sheets")
        return bundled_document()


def seed_prices(settings: Settings) -> Callable[[Litestar], Awaitable[None]]:
    async def seed(app: Litestar) -> None:
        prices: PriceService = app.state.prices
        if await prices.has_versions():
            return
        doc = await asyncio.to_thread(first_document, settings)  # a source may be a URL
        version = await prices.seed_if_empty(doc, SEEDER)
        if version is not None:
            log.info("prices.seeded", version=version.version, models=version.models)

    return seed


async def forget_metrics(app: Litestar) -> None:
    """A serving process that exits marks its metric files dead (multiprocess mode only)."""
    mark_process_dead()


Hooks = list[Callable[..., Any]]


def startup_hooks(settings: Settings, database_url: str) -> tuple[Hooks, Hooks]:
    on_startup: Hooks = [seed_prices(settings)]
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
