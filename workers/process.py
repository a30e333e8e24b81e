"""What each `ledger worker` process imports: `dramatiq workers.process:boot`.

Dramatiq's command line calls `boot()` in every worker process it starts; `boot`
reads the settings from the environment (the same LEDGER_* variables as every
command), sets up the Redis broker and declares the actors on it.
"""

from __future__ import annotations

from ledger.logging import configure_logging
from ledger.settings import SettingsError, load_settings
from workers.actors import JobContext, register_actors
from workers.broker import setup_broker


def boot() -> None:
    settings = load_settings()
    if settings.database_url is None or settings.redis_url is None:
        raise SettingsError("ledger worker needs LEDGER_DATABASE_URL and LEDGER_REDIS_URL")
    configure_logging(settings.log_format, settings.log_level)
    broker = setup_broker(settings, process_boot=False)  # the dramatiq CLI emits process_boot itself
    register_actors(broker, JobContext(settings, settings.database_url, trigger="schedule"))
