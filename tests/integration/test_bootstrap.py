"""First start of `ledger serve` on an empty database publishes the bundled sheets, once; refresh after."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from litestar.testing import TestClient

from ledger.app import create_app
from ledger.bootstrap import startup_hooks
from ledger.db import migrate
from ledger.prices.sources import load_sources
from ledger.settings import load_settings, normalize_database_url
from pricing.bundled import bundled_document
from pricing.document import document_to_builtins
from pricing.money import format_amount
from tests import pg
from tests.conftest import FINANCE, GATEWAY, TEST_ENV, VIEWER, auth

ROOT = Path(__file__).resolve().parents[2]


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


def _gpt5_input(client: TestClient[Any]) -> tuple[str, str]:
    r = client.post(
        "/v1/quotes",
        json={"model": "gpt-5", "usage": {"prompt_tokens": 200_000, "completion_tokens": 0}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    # the input rate per 1M tokens: 5 x the charge for 200,000 (within gpt-5's 272,000 limit)
    return r.json()["price_version"], format_amount(Decimal(r.json()["charge"]["amount"]) * 5)


def test_refresh_after_first_start_and_finance_publishes_changes_nothing(pg_admin_url: str) -> None:
    """The issue's story: start, refresh, finance publishes gpt-5 input 1, the contract example, refresh."""
    from tests.api.test_prices_api import run_cli

    name, url = pg.create_database(pg_admin_url)
    try:
        sa_url = normalize_database_url(url)
        migrate(sa_url)
        settings = load_settings({**TEST_ENV, "LEDGER_DATABASE_URL": url})
        on_startup, on_shutdown = startup_hooks(settings, sa_url)
        app = create_app(settings, sa_url, on_startup=on_startup, on_shutdown=on_shutdown)
        with TestClient(app) as client:
            seeded, rate = _gpt5_input(client)
            assert rate == "1.25"

            def refresh() -> tuple[int, Any]:
                done = run_cli(url, "prices", "refresh")
                return done.returncode, json.loads(done.stdout)

            # The first refresh after start: the seed was what the sources produce. No empty diff.
            assert refresh()[1]["outcome"] == "unchanged"
            doc = document_to_builtins(load_sources(settings.price_sources))
            for model in doc["models"]:
                if model["model"] == "gpt-5":
                    model["rates"]["input"] = "1"
            r = client.post("/admin/v1/price-versions", json=doc, headers=auth(FINANCE))
            assert r.status_code == 201 and r.json()["active"] is True
            finance = r.json()["version"]

            code, result = refresh()
            assert (code, result["outcome"], result["published"]) == (0, "unchanged", False)
            assert _gpt5_input(client) == (finance, "1")

            contract = run_cli(url, "prices", "publish", str(ROOT / "examples" / "contract-prices.json"))
            assert contract.returncode == 2 and "drops" in contract.stderr  # it lacks gpt-5 & co.
            contract = run_cli(
                url, "prices", "publish", str(ROOT / "examples" / "contract-prices.json"), "--replace"
            )
            assert contract.returncode == 0, contract.stderr
            code, result = refresh()
            assert (code, result["outcome"], result["published"]) == (0, "unchanged", False)
            listed = client.get("/admin/v1/price-versions", headers=auth(VIEWER)).json()["data"]
            assert [v["published_by"].split(":")[0] for v in listed] == ["cli", "finance", "bootstrap"]
            assert listed[1]["version"] == finance and listed[2]["version"] == seeded
    finally:
        pg.drop_database(pg_admin_url, name)


def test_the_upgrade_remembers_the_last_seeded_or_refreshed_version(pg_admin_url: str) -> None:
    """Migration 0008 on a database that already has prices: finance's later version stays safe."""
    from alembic import command

    from ledger.db import alembic_config

    name, url = pg.create_database(pg_admin_url)
    try:
        sa_url = normalize_database_url(url)
        command.upgrade(alembic_config(sa_url), "0006")
        with psycopg.connect(url, autocommit=True) as conn:
            for action in ("prices.seed", "prices.refresh", "prices.publish"):
                version = conn.execute(
                    "INSERT INTO price_versions (content_hash, currency, effective_at, source, document, "
                    "published_by) VALUES (repeat('a', 64), 'USD', now(), '', '{}', 'x') RETURNING version"
                ).fetchone()
                assert version is not None
                conn.execute(
                    "INSERT INTO audit_log (actor, role, action, target) VALUES ('x', 'admin', %s, %s)",
                    (action, version[0]),
                )
        migrate(sa_url)
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT currency, version_id, action FROM price_refreshes").fetchall()
        assert rows == [("USD", 2, "upgrade")]  # v2 (the refresh), not v3 (published by hand)
    finally:
        pg.drop_database(pg_admin_url, name)
