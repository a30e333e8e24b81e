"""ASGI entry point for multi-process serving (`ledger serve --workers N`).

Each uvicorn worker process builds its own app (its own connection pool) from the
same LEDGER_* settings. Multi-process serving needs LEDGER_DATABASE_URL: in embedded
mode the background jobs run inside the single serving process.
"""

from __future__ import annotations

from litestar import Litestar

from ledger.app import create_app
from ledger.bootstrap import startup_hooks
from ledger.logging import configure_logging
from ledger.settings import load_settings


def create() -> Litestar:
    settings = load_settings()
    if settings.database_url is None:
        raise SystemExit("ledger: multi-process serving needs LEDGER_DATABASE_URL")
    configure_logging(settings.log_format, settings.log_level)
    on_startup, on_shutdown = startup_hooks(settings, settings.database_url)
    return create_app(settings, settings.database_url, on_startup=on_startup, on_shutdown=on_shutdown)
