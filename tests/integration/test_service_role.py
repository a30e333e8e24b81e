"""Least privilege: the service role can do what the service does, and nothing that bypasses the ledger.

A unique role is created on the shared server, granted with the real
`ledger grant-service-role` command, and used over TCP (trust auth on 127.0.0.1):
the tampering statements fail with insufficient_privilege, while a real
reserve -> settle, a deposit and a reconciliation run through the service code
succeed as that role. The role is dropped afterwards (DROP OWNED, then DROP ROLE).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from litestar.testing import TestClient

from ledger.settings import load_settings, normalize_database_url
from tests.conftest import FINANCE, GATEWAY, TEST_ENV, VIEWER, auth, new_id, open_account
from tests.serving import ROOT


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{role}@{host}:{parts.port or 5432}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def ledger(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", *args],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def make_role(pg_admin_url: str, database: str) -> Iterator[Any]:
    made: list[str] = []

    def make() -> str:
        role = f"ledger_svc_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
        made.append(role)
        return role

    yield make
    for role in made:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')  # its grants and default privileges here
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture(scope="module")
def service_role(make_role: Any, database: str) -> str:
    role: str = make_role()
    done = ledger("grant-service-role", role, LEDGER_DATABASE_URL=database)
    assert done.returncode == 0, done.stderr
    granted = json.loads(done.stdout)["tables"]
    assert granted["journal_entries"] == ["SELECT", "INSERT"]
    assert granted["holds"] == ["SELECT", "INSERT", "UPDATE"]
    assert granted["alembic_version"] == ["SELECT"]
    assert granted["sql_functions"] == []  # bodies a downgrade runs as the owner
    return role


TAMPERING = [
    "ALTER TABLE journal_entries DISABLE TRIGGER ALL",
    "UPDATE journal_entries SET amount = amount WHERE false",
    "DELETE FROM journal_entries WHERE false",
    "TRUNCATE journal_entries",
    "TRUNCATE holds",
    "SET session_replication_role = replica",
    "ALTER TABLE holds DROP CONSTRAINT holds_pkey",
    "DROP TRIGGER journal_entries_append_only ON journal_entries",
    "UPDATE audit_log SET reason = 'x' WHERE false",
    "CREATE TABLE shadow (id int)",
    "INSERT INTO sql_functions (name, revision, sha256, body) VALUES ('x', '9999', '', '')",
    "SELECT count(*) FROM sql_functions",
    "UPDATE plan_revisions SET reason = 'x' WHERE false",
    "DELETE FROM plan_revisions WHERE false",
    "UPDATE plan_rates SET price = price WHERE false",
    "DELETE FROM plan_rates WHERE false",
]


@pytest.mark.parametrize("statement", TAMPERING)
def test_the_service_role_cannot_tamper(database: str, service_role: str, statement: str) -> None:
    with (
        psycopg.connect(as_role(database, service_role)) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(statement)


def test_the_service_works_as_the_service_role(
    database: str, service_role: str, contract_version: str
) -> None:
    from ledger.app import create_app

    url = as_role(database, service_role)
    settings = load_settings(dict(TEST_ENV, LEDGER_DATABASE_URL=url))
    with TestClient(create_app(settings, normalize_database_url(url))) as client:
        assert client.get("/readyz").status_code == 200
        account = open_account(client, "5")
        body = {
            "account_id": account,
            "idempotency_key": new_id("key"),
            "model": "gpt-6-luna",
            "max_output_tokens": 1000,
            "max_input_tokens": 10000,
            "price_version": contract_version,
        }
        r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
        assert r.status_code == 201, r.text
        hold = r.json()
        usage = {"prompt_tokens": 1000, "completion_tokens": 100}
        r = client.post(f"/v1/holds/{hold['id']}/settle", json={"usage": usage}, headers=auth(GATEWAY))
        assert r.status_code == 200, r.text
        assert r.json()["charge"]["amount"] == "0.004"  # 1000 x 2.5 / 1e6 + 100 x 15 / 1e6
        r = client.get(f"/v1/accounts/{account}/balance", headers=auth(GATEWAY))
        assert r.json()["balance"] == "4.996" and r.json()["held"] == "0"
        r = client.post("/admin/v1/reconciliation/runs", json={}, headers=auth(FINANCE))
        assert r.status_code in (200, 201), r.text
        r = client.get("/admin/v1/integrity", headers=auth(VIEWER))
        assert r.json()["ok"] is True, r.text


def test_the_grant_is_idempotent_and_covers_new_tables(
    database: str, service_role: str, make_role: Any
) -> None:
    table = f"later_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint GENERATED ALWAYS AS IDENTITY, note text)")
        try:
            # a later migration's table is usable at once (default privileges), but only append-only
            with psycopg.connect(as_role(database, service_role), autocommit=True) as svc:
                svc.execute(f"INSERT INTO {table} (note) VALUES ('x')")
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    svc.execute(f"UPDATE {table} SET note = 'y'")
            conn.execute(f'GRANT ALL ON journal_entries TO "{service_role}"')  # drift
            again = ledger("grant-service-role", service_role, LEDGER_DATABASE_URL=database)
            assert again.returncode == 0, again.stderr
            assert json.loads(again.stdout)["tables"][table] == ["SELECT", "INSERT"]
            row = conn.execute(
                "SELECT has_table_privilege(%s, 'journal_entries', 'UPDATE'),"
                " has_table_privilege(%s, 'journal_entries', 'TRUNCATE'),"
                " has_table_privilege(%s, 'journal_entries', 'INSERT')",
                (service_role,) * 3,
            ).fetchone()
            assert row == (False, False, True)
        finally:
            conn.execute(f"DROP TABLE {table}")


def test_migrate_grants_the_configured_service_role(database: str, make_role: Any) -> None:
    role = make_role()
    done = ledger(
        "migrate",
        LEDGER_MIGRATION_DATABASE_URL=database,
        LEDGER_DATABASE_URL=as_role(database, role),
        LEDGER_SERVICE_ROLE=role,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["granted"] == role
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT has_table_privilege(%s, 'holds', 'UPDATE'), has_table_privilege(%s, 'holds', 'DELETE')",
            (role, role),
        ).fetchone()
    assert row == (True, False)


def test_refuses_a_superuser(database: str) -> None:
    done = ledger("grant-service-role", "postgres", LEDGER_DATABASE_URL=database)
    assert done.returncode == 2 and "superuser" in done.stderr


def test_price_plans_work_as_the_service_role(
    database: str, service_role: str, contract_version: str
) -> None:
    """Create, revise, assign; a reserve pinned to a version the plan's rates were not stored at
    materialises them on first use (an INSERT of the service's); the settle charges them."""
    from ledger.app import create_app

    url = as_role(database, service_role)
    settings = load_settings(dict(TEST_ENV, LEDGER_DATABASE_URL=url))
    with TestClient(create_app(settings, normalize_database_url(url))) as client:
        plan_id = new_id("plan")
        document = {"models": {"gpt-6-luna": {"adjust_percent": "-20"}}}
        r = client.post(
            "/admin/v1/plans",
            json={"plan_id": plan_id, "currency": "USD", "document": document, "reason": "role test"},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
        r = client.post(
            f"/admin/v1/plans/{plan_id}/revisions",
            json={"document": document, "reason": "role test"},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
        account = open_account(client, "5")
        r = client.put(
            f"/admin/v1/accounts/{account}/plan",
            json={"plan_id": plan_id, "reason": "role test"},
            headers=auth(FINANCE),
        )
        assert r.status_code == 200, r.text
        body = {
            "account_id": account,
            "idempotency_key": new_id("key"),
            "model": "gpt-6-luna",
            "max_output_tokens": 1000,
            "max_input_tokens": 10000,
            "price_version": contract_version,
        }
        r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
        assert r.status_code == 201, r.text
        assert r.json()["plan"] == {"id": plan_id, "revision": 2}
        usage = {"prompt_tokens": 1000, "completion_tokens": 100}
        r = client.post(f"/v1/holds/{r.json()['id']}/settle", json={"usage": usage}, headers=auth(GATEWAY))
        assert r.status_code == 200, r.text
        assert r.json()["charge"]["amount"] == "0.0032"  # 1000 x 2 / 1e6 + 100 x 12 / 1e6
