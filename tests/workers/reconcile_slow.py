"""One slow reconciliation pass, for the kill test: `python reconcile_slow.py URL BATCH PAUSE APP_NAME`.

After each hold it resolves (inside the batch's transaction, before the commit) it
sleeps PAUSE seconds in the database and prints `resolved <hold_id>`, so the test
can SIGKILL it while a batch is half done.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from sqlalchemy import text

from ledger.context import CLI
from ledger.db import make_engine
from ledger.holds.service import HoldService
from ledger.logging import configure_logging
from ledger.prices.service import PriceService
from ledger.reconciliation.service import ReconciliationService
from ledger.settings import load_settings


async def main(url: str, batch: int, pause: float, app_name: str) -> None:
    configure_logging("console", "WARNING")  # logs to stderr; stdout carries the progress lines
    settings = load_settings(
        {
            "LEDGER_DATABASE_URL": url,
            "LEDGER_RECONCILE_GRACE_SECONDS": "0",
            "LEDGER_RECONCILE_BATCH_SIZE": str(batch),
            "LEDGER_GATEWAY_TOKENS": "unused",
        }
    )
    assert settings.database_url is not None
    separator = "&" if "?" in settings.database_url else "?"
    engine = make_engine(f"{settings.database_url}{separator}application_name={app_name}", pool_size=2)

    async def slowly(conn: Any, item: Any) -> None:
        await conn.execute(text("SELECT pg_sleep(:pause)"), {"pause": pause})
        print(f"resolved {item.hold_id}", flush=True)

    holds = HoldService(engine, PriceService(engine), settings)
    service = ReconciliationService(engine, holds, settings, on_resolved=slowly)
    print("started", flush=True)
    summary = await service.run_once("cli", CLI)
    print(f"finished {summary['settled'] + summary['released']}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]))
