"""The app's start keeps its long-lived objects out of garbage collections (`ledger.app.settle_heap`)."""

from __future__ import annotations

import gc
from typing import Any

from litestar.testing import TestClient


def test_the_objects_made_at_start_are_kept_out_of_garbage_collections(client: TestClient[Any]) -> None:
    # frozen at start: a full collection never walks them again
    assert gc.get_freeze_count() > 10_000
