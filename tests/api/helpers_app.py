"""A second app over the suite's database, with settings of the test's own (e.g. a low limit)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from litestar.testing import TestClient

from ledger.settings import load_settings, normalize_database_url
from tests.conftest import TEST_ENV


@contextmanager
def app_client(database: str, **env: str) -> Iterator[TestClient[Any]]:
    from ledger.app import create_app

    settings = load_settings({**TEST_ENV, "LEDGER_DATABASE_URL": database, "LEDGER_DB_POOL_SIZE": "2", **env})
    with TestClient(create_app(settings, normalize_database_url(database))) as client:
        yield client
