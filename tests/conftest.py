"""Shared fixtures: a migrated PostgreSQL database per test process, the app, clients.

Tests never share rows by accident: each makes its own accounts (unique ids), so
no cleanup between tests is needed and the whole-ledger integrity check stays
meaningful for every test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from ledger.settings import load_settings, normalize_database_url
from tests import pg

# LiteLLM (imported by the LiteLLM hook's tests) fetches a cost map from the internet at
# import unless told to use its bundled copy: no test may reach outside this machine.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")

# Outside embedded mode `ledger serve` refuses tokens shorter than 32 characters.
GATEWAY = "test-gateway-token-4c1f0e9a7b2d6e35"
ADMIN = "test-admin-token-8d2b7c4e1a9f0635"
FINANCE = "test-finance-token-3e7a9c1d5b0f2846"
VIEWER = "test-viewer-token-6b0d2f8e4a1c9753"
IDENTITY_SECRET = "test-identity-secret-5f2a8c0e7b3d1946"

TEST_ENV = {
    "LEDGER_GATEWAY_TOKENS": GATEWAY,
    "LEDGER_ADMIN_TOKENS": f"{ADMIN}:admin,{FINANCE}:finance,{VIEWER}:viewer",
    "LEDGER_IDENTITY_SECRET": IDENTITY_SECRET,
    # The suite's tests share one client address; some send wrong tokens on purpose.
    # The throttle's own tests build apps with a low limit (tests/api/test_auth_throttle.py).
    "LEDGER_AUTH_FAILURE_LIMIT": "100000",
    # The test client and the test servers speak plain http.
    "LEDGER_CONSOLE_SECURE_COOKIE": "0",
    "LEDGER_RECONCILE_GRACE_SECONDS": "0",
    "LEDGER_LOG_FORMAT": "console",
    "LEDGER_LOG_LEVEL": "warning",
    "LEDGER_DB_POOL_SIZE": "10",
    # The alert tests' webhook receivers listen on plain http at 127.0.0.2 (tests/workers/alerts.py);
    # 127.0.0.1 and every other internal address stay refused.
    "LEDGER_WEBHOOK_ALLOW_HTTP": "1",
    "LEDGER_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.2/32",
}


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    return pg.admin_url()


@pytest.fixture(scope="session")
def database(pg_admin_url: str) -> Iterator[str]:
    """libpq URL of a freshly migrated database, dropped after the session."""
    from ledger.db import migrate

    name, url = pg.create_database(pg_admin_url)
    migrate(normalize_database_url(url))
    yield url
    pg.drop_database(pg_admin_url, name)


@pytest.fixture
def own_database(pg_admin_url: str) -> Iterator[str]:
    """libpq URL of an empty database for one test, dropped after it: for a `ledger serve`
    started before any price is published (serve seeds the bundled prices into a database
    with no price version, which would change the shared `database` for the tests after)."""
    name, url = pg.create_database(pg_admin_url)
    yield url
    pg.drop_database(pg_admin_url, name)


@pytest.fixture(scope="session")
def sa_url(database: str) -> str:
    return normalize_database_url(database)


@pytest.fixture(scope="session")
def settings(database: str) -> Any:
    env = dict(TEST_ENV, LEDGER_DATABASE_URL=database)
    return load_settings(env)


@pytest.fixture(scope="session")
def app(settings: Any, sa_url: str) -> Any:
    from ledger.app import create_app

    return create_app(settings, sa_url)


@pytest.fixture(scope="session")
def client(app: Any) -> Iterator[TestClient[Any]]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def sql(database: str) -> Iterator[psycopg.Connection[Any]]:
    """A raw psycopg connection (not autocommit) for direct-SQL tests."""
    with psycopg.connect(database) as conn:
        yield conn


def new_id(prefix: str = "acct") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def open_account(
    client: TestClient[Any],
    deposit: str | None = None,
    *,
    currency: str | None = None,
    credit_limit: str | None = None,
) -> str:
    """Create an account as finance (sending only the fields given) and deposit into it."""
    account_id = new_id()
    body = {"account_id": account_id, "currency": currency, "credit_limit": credit_limit}
    r = client.post(
        "/admin/v1/accounts",
        json={k: v for k, v in body.items() if v is not None},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    if deposit is not None:
        r = client.post(
            f"/admin/v1/accounts/{account_id}/deposits",
            json={"idempotency_key": new_id("dep"), "amount": deposit},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
    return account_id


@pytest.fixture
def make_account(client: TestClient[Any]) -> Any:
    def make(deposit: str | None = None, *, credit_limit: str = "0", currency: str = "USD") -> str:
        return open_account(client, deposit, currency=currency, credit_limit=credit_limit)

    return make


def assert_integrity(client: TestClient[Any]) -> dict[str, Any]:
    r = client.get("/admin/v1/integrity", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["ok"] is True, body
    return body


@pytest.fixture(scope="session")
def contract_version(client: TestClient[Any]) -> str:
    """The contract's example price document, published once for the session (USD)."""
    from pricing.examples import contract_price_document

    r = client.post("/admin/v1/price-versions", json=contract_price_document(), headers=auth(FINANCE))
    assert r.status_code == 201, r.text
    version: str = r.json()["version"]
    return version


_used_currencies: set[str] = set()


def fresh_currency() -> str:
    """A currency code no other test uses, so a test may publish prices without moving anyone else's."""
    import random
    import string

    while True:
        code = "X" + "".join(random.choices(string.ascii_uppercase, k=2))
        if code not in _used_currencies and code != "XXX":
            _used_currencies.add(code)
            return code


def publish(client: TestClient[Any], document: dict[str, Any], *, replace: bool = False) -> str:
    """Publish a price document; `replace` lets it drop models the active version prices."""
    body = {**document, "replace": True} if replace else document
    r = client.post("/admin/v1/price-versions", json=body, headers=auth(FINANCE))
    assert r.status_code == 201, r.text
    version: str = r.json()["version"]
    return version


def simple_document(
    currency: str,
    *,
    input_rate: str = "2",
    output_rate: str = "10",
    effective_at: str | None = None,
    model: str = "t-simple",
    max_input: int = 1000,
    max_output: int = 500,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "currency": currency,
        "source": "test sheet",
        "models": [
            {
                "model": model,
                "max_input_tokens": max_input,
                "max_output_tokens": max_output,
                "rates": {"input": input_rate, "output": output_rate},
            },
        ],
    }
    if effective_at:
        doc["effective_at"] = effective_at
    return doc


@pytest.fixture
def world(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    """A simple sheet (`simple_document`) in a currency of its own and an account holding 1 in it.

    A module that needs another world defines its own `world` fixture, which wins over this one.
    """
    currency = fresh_currency()
    version = publish(client, simple_document(currency))
    account_id = make_account("1", currency=currency)
    return {"currency": currency, "version": version, "account": account_id}


def reserve(
    client: TestClient[Any],
    account_id: str,
    model: str = "t-simple",
    *,
    key: str | None = None,
    **fields: Any,
) -> Any:
    """POST /v1/holds as the gateway; a fresh idempotency key unless `key` is given."""
    body = {"account_id": account_id, "idempotency_key": key or new_id("r"), "model": model, **fields}
    return client.post("/v1/holds", json=body, headers=auth(GATEWAY))


def call(client: TestClient[Any], hold_id: str, verb: str, body: Any = None) -> Any:
    """POST /v1/holds/{hold_id}/{verb} as the gateway (settle, usage, interrupt, release...)."""
    return client.post(f"/v1/holds/{hold_id}/{verb}", json=body, headers=auth(GATEWAY))


def usage(p: int, c: int, **extra: Any) -> dict[str, Any]:
    """A `usage` body: prompt and completion tokens, and any other usage fields."""
    return {"usage": {"prompt_tokens": p, "completion_tokens": c, **extra}}


def balance(client: TestClient[Any], account_id: str) -> dict[str, str]:
    """The gateway's view of an account: balance, held and available."""
    r = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY))
    assert r.status_code == 200
    body: dict[str, str] = r.json()
    return {k: body[k] for k in ("balance", "held", "available")}
