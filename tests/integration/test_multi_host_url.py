"""A multi-host LEDGER_DATABASE_URL reaches the database everywhere: the admin pool, the
group-commit lanes (reserve and settle), migrations and the advisory locks.

The URL lists a host where nothing listens before the real one, in both accepted forms
(libpq's, as `pg_autoctl show uri` prints it, and SQLAlchemy's `?host=h:p&host=h:p`), so
every connection has to walk the host list as libpq does.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Any

import pytest
from litestar.testing import TestClient

from ledger.database_url import DatabaseURL, Host
from ledger.settings import load_settings
from tests.conftest import GATEWAY, TEST_ENV, auth, call, reserve, usage
from tests.serving import ROOT, free_port


def multi_host(database: str) -> DatabaseURL:
    url = DatabaseURL.parse(database)
    dead = Host("127.0.0.1", free_port())  # nothing listens there
    params = dict(url.params, target_session_attrs="read-write")
    return dataclasses.replace(url, hosts=(dead, *url.hosts), params=tuple(sorted(params.items())))


@pytest.mark.parametrize("form", ["libpq", "sqlalchemy"])
def test_reserve_and_settle_through_a_multi_host_url(form: str, database: str, world: dict[str, Any]) -> None:
    url = multi_host(database)
    raw = url.libpq() if form == "libpq" else url.sqlalchemy()
    if form == "libpq":
        assert "," in raw.split("?")[0]  # host1:port1,host2:port2 before the path
    else:
        assert raw.count("host=") == 2
    settings = load_settings(dict(TEST_ENV, LEDGER_DATABASE_URL=raw))
    from ledger.app import create_app

    with TestClient(create_app(settings, settings.database_url or "")) as client:
        r = reserve(client, world["account"], max_output_tokens=10)
        assert r.status_code == 201, r.text
        hold = r.json()
        r = call(client, hold["id"], "settle", usage(100, 5))
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "settled"
        r = client.get(f"/v1/accounts/{world['account']}/balance", headers=auth(GATEWAY))
        assert r.status_code == 200
        assert r.json()["held"] == "0"
        assert client.get("/readyz").status_code == 200


def test_migrate_and_the_scheduler_lock_through_a_multi_host_url(database: str) -> None:
    url = multi_host(database)
    env = {**os.environ, "LEDGER_DATABASE_URL": url.libpq()}
    result = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "migrate"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert '"migrated": true' in result.stdout

    from workers.locks import leader_lock

    lock = leader_lock(url.sqlalchemy())
    try:
        assert lock.try_acquire()
        assert lock.still_held()
    finally:
        lock.release()
