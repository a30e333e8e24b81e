"""What the ledger records as the actor of a token: its name, or a keyed fingerprint.

Against the real database: the journal, the audit log and the holds' transactions record
`role:name` for a named token and `role:<keyed fingerprint>` otherwise, never anything
an unkeyed hash of the token would give.
"""

from __future__ import annotations

import hashlib
from typing import Any

from litestar.testing import TestClient

from tests.api.helpers_app import app_client
from tests.conftest import FINANCE, GATEWAY, VIEWER, auth, fresh_currency, new_id, simple_document

NAMED_FINANCE = "named-finance-token-0f3b7d1e9a5c2846"
NAMED_GATEWAY = "named-gateway-token-7e1a5c9d3b0f4682"


def journal(client: TestClient[Any], account_id: str) -> list[dict[str, Any]]:
    r = client.get(f"/admin/v1/accounts/{account_id}/transactions", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["data"]
    return rows


def test_unnamed_token_is_recorded_by_a_keyed_fingerprint(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("2")
    actor = journal(client, account_id)[0]["actor"]
    role, fingerprint = actor.split(":")
    assert role == "finance"
    assert len(fingerprint) == 16
    assert not hashlib.sha256(FINANCE.encode()).hexdigest().startswith(fingerprint)
    assert FINANCE not in actor
    principal = client.app.state.tokens.lookup(FINANCE)
    assert actor == principal.identity


def test_named_tokens_are_recorded_by_name_in_journal_audit_log_and_holds(database: str) -> None:
    env = {
        "LEDGER_GATEWAY_TOKENS": f"{GATEWAY},{NAMED_GATEWAY}:edge-eu.1",
        "LEDGER_ADMIN_TOKENS": f"{VIEWER}:viewer,{NAMED_FINANCE}:finance:alice",
    }
    with app_client(database, **env) as named:
        currency = fresh_currency()
        r = named.post(
            "/admin/v1/price-versions", json=simple_document(currency), headers=auth(NAMED_FINANCE)
        )
        assert r.status_code == 201, r.text
        account_id = new_id()
        body = {"account_id": account_id, "currency": currency}
        assert named.post("/admin/v1/accounts", json=body, headers=auth(NAMED_FINANCE)).status_code == 201
        deposit = {"idempotency_key": new_id("dep"), "amount": "3", "reference": "wire"}
        r = named.post(f"/admin/v1/accounts/{account_id}/deposits", json=deposit, headers=auth(NAMED_FINANCE))
        assert r.status_code == 201, r.text
        reserve = {
            "account_id": account_id,
            "idempotency_key": "h1",
            "model": "t-simple",
            "max_output_tokens": 10,
        }
        r = named.post("/v1/holds", json=reserve, headers=auth(NAMED_GATEWAY))
        assert r.status_code == 201, r.text

        actors = {row["kind"]: row["actor"] for row in journal(named, account_id)}
        assert actors["deposit"] == "finance:alice"
        assert actors["reserve"] == "gateway:edge-eu.1"
        r = named.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER))
        assert r.status_code == 200, r.text
        entries = r.json()["data"]
        assert entries and {e["actor"] for e in entries} == {"finance:alice"}
        r = named.get("/admin/v1/audit-log", params={"actor": "finance:alice"}, headers=auth(VIEWER))
        assert account_id in {e["target"] for e in r.json()["data"]}
