"""The pool never hands a request a connection that died in a database restart.

A throwaway PostgreSQL 15 cluster of this test's own (initdb + pg_ctl, as the `postgres`
user when run as root, on a free loopback port, in a temporary folder; the shared server
is never touched): the app answers an admin request, the cluster restarts (every connection in
the pool is now dead), and the next admin request is still 200, because the pool
tests each connection as it hands it out (`pool_pre_ping`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from ledger.db import migrate
from ledger.settings import load_settings, normalize_database_url
from tests import pg
from tests.conftest import ADMIN, TEST_ENV, auth, new_id
from tests.serving import free_port

BIN = Path("/usr/lib/postgresql/15/bin")


class Cluster:
    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.admin_url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        data, log = str(self.folder / "data"), str(self.folder / "server.log")
        run_as_owner(str(BIN / "pg_ctl"), "-D", data, "-l", log, "-o", options, "-w", *args)


def run_as_owner(*command: str) -> None:
    """As the `postgres` user when this is root (PostgreSQL refuses root), else as this user."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # No pipes: the server that pg_ctl starts would hold them open after pg_ctl returns.
    subprocess.run(
        [*prefix, *command],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if not (BIN / "initdb").exists():
        pytest.skip("needs PostgreSQL 15's initdb and pg_ctl")
    folder = Path(tempfile.mkdtemp(prefix="ldgrs", dir="/tmp"))  # short: the socket lives in it
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
    own = Cluster(folder, free_port())
    run_as_owner(
        str(BIN / "initdb"), "-D", str(folder / "data"), "-U", "postgres", "-A", "trust", "--no-sync"
    )
    own.pg_ctl("start")
    try:
        yield own
    finally:
        own.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(folder, ignore_errors=True)


def test_an_admin_request_after_a_database_restart_is_200(cluster: Cluster) -> None:
    from ledger.app import create_app

    _, url = pg.create_database(cluster.admin_url)
    migrate(normalize_database_url(url))
    settings: Any = load_settings({**TEST_ENV, "LEDGER_DATABASE_URL": url})
    account = new_id()
    with TestClient(create_app(settings, normalize_database_url(url))) as client:
        r = client.post("/admin/v1/accounts", json={"account_id": account}, headers=auth(ADMIN))
        assert r.status_code == 201, r.text
        for _ in range(3):  # several pooled connections, all of them about to die
            assert client.get(f"/admin/v1/accounts/{account}", headers=auth(ADMIN)).status_code == 200
        cluster.pg_ctl("restart", "-m", "fast")
        for _ in range(3):
            r = client.get(f"/admin/v1/accounts/{account}", headers=auth(ADMIN))
            assert r.status_code == 200, r.text
            assert r.json()["account_id"] == account
