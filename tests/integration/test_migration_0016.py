"""Migration 0016 goes down to 0015's functions and up again, on a database of its own."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from ledger.db import alembic_config, migrate
from ledger.settings import normalize_database_url
from tests import pg


@pytest.fixture
def scratch(pg_admin_url: str) -> Iterator[str]:
    name, url = pg.create_database(pg_admin_url)
    yield url
    pg.drop_database(pg_admin_url, name)


def sources(url: str) -> dict[str, tuple[str, list[str]]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT proname, prosrc, coalesce(proconfig, '{}') FROM pg_proc "
            "WHERE proname IN ('ledger_hold_batch', 'ledger_entries_apply')"
        ).fetchall()
    return {name: (source, list(config)) for name, source, config in rows}


def test_0016_downgrades_to_0015_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    migrate(url)
    head = sources(scratch)
    assert "u_read_balance" in head["ledger_entries_apply"][0]
    assert "array_agg(h.id), array_agg(h)" in head["ledger_hold_batch"][0]
    command.downgrade(alembic_config(url), "0015")
    previous = sources(scratch)
    assert "u_read_balance" not in previous["ledger_entries_apply"][0]
    assert "SELECT * INTO r FROM holds WHERE id" in previous["ledger_hold_batch"][0]
    assert "array_agg(h.id), array_agg(h)" not in previous["ledger_hold_batch"][0]
    migrate(url)
    assert sources(scratch) == head
