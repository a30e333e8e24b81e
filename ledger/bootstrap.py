"""What `ledger serve` does at start beyond serving: seeding prices, in-process jobs (embedded mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledger.settings import Settings


def startup_hooks(settings: Settings, database_url: str) -> tuple[list[Callable[..., Any]], list[Callable[..., Any]]]:
    return [], []
