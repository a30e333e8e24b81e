"""First start of `ledger serve` on an empty database publishes the bundled sheets, once."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from ledger.app import create_app
from ledger.bootstrap import startup_hooks
from ledger.db import migrate
from ledger.settings import load_settings, normalize_database_url
from pricing.bundled import bundled_document
from tests import pg
from tests.conftest import GATEWAY, TEST_ENV, VIEWER, auth


def test_empty_database_gets_the_bundled_sheets_once(pg_admin_url: str) -> None:
    name, url = pg.create_database(pg_admin_url)
    try:
        sa_url = normalize_database_url(url)
        migrate(sa_url)
        settings = load_settings({**TEST_ENV, "LEDGER_DATABASE_URL": url})
        for _ in range(2):  # a restart must not publish again
            on_startup, on_shutdown = startup_hooks(settings, sa_url)
            app = create_app(settings, sa_url, on_startup=on_startup, on_shutdown=on_shutdown)
            with TestClient(app) as client:
                versions: list[dict[str, Any]] = client.get(
                    "/admin/v1/price-versions", headers=auth(VIEWER)
                ).json()["data"]
        assert len(versions) == 1
        assert versions[0]["published_by"] == "bootstrap"
        assert sorted(versions[0]["models"]) == sorted(m.model for m in bundled_document().models)
        with TestClient(app) as client:
            r = client.post(
                "/v1/quotes",
                json={
                    "model": "claude-sonnet-4-6",
                    "usage": {"prompt_tokens": 1000, "completion_tokens": 100},
                },
                headers=auth(GATEWAY),
            )
            assert r.status_code == 200
            assert r.json()["charge"]["amount"] == "0.0045"  # 1000 x 3 + 100 x 15, per 1e6
    finally:
        pg.drop_database(pg_admin_url, name)
