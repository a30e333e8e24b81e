"""Where the suite's PostgreSQL comes from.

In order: LEDGER_TEST_ADMIN_URL; the machine's server at 127.0.0.1:5432 (as on CI);
else an embedded pgserver in a temporary folder. Each test process (xdist worker)
creates a database with a unique name, migrates it with Alembic (never
create_all) and drops it at the end, so runs never collide and never touch
`test` or `postgres`.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

DEFAULT_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _reachable(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def admin_url() -> str:
    explicit = os.environ.get("LEDGER_TEST_ADMIN_URL")
    if explicit:
        return explicit
    if _reachable(DEFAULT_ADMIN):
        return DEFAULT_ADMIN
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    import pgserver

    folder = tempfile.mkdtemp(prefix="ldgpg", dir="/tmp")
    server = pgserver.get_server(folder, cleanup_mode="delete")
    _servers.append(server)
    uri: str = server.get_uri()
    return uri


_servers: list[object] = []


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def create_database(admin: str) -> tuple[str, str]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"ledger_test_{uuid.uuid4().hex[:10]}_{worker}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, with_database(admin, name)


def drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
