"""Account controls: PATCH credit limit and metadata, freeze / unfreeze, the below-zero list.

Prices as in test_holds_api: a simple sheet per test in its own currency (input 2,
output 10 per 1M; max input 1000, max output 500), so reserving with
max_output_tokens O holds 0.002 + O x 0.00001.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import (
    ADMIN,
    FINANCE,
    GATEWAY,
    VIEWER,
    assert_integrity,
    auth,
    new_id,
    reserve,
)


def audit_of(client: TestClient[Any], account_id: str) -> list[dict[str, Any]]:
    r = client.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER))
    assert r.status_code == 200
    entries: list[dict[str, Any]] = r.json()["data"]
    return entries


def account(client: TestClient[Any], account_id: str) -> dict[str, Any]:
    r = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER))
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


def freeze(client: TestClient[Any], account_id: str, verb: str = "freeze", token: str = FINANCE) -> Any:
    return client.post(
        f"/admin/v1/accounts/{account_id}/{verb}", json={"reason": f"{verb} for test"}, headers=auth(token)
    )


# --- PATCH -------------------------------------------------------------------------


def test_patch_credit_limit_and_metadata_is_audited(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("2")
    r = client.patch(
        f"/admin/v1/accounts/{account_id}",
        json={"credit_limit": "7.5", "metadata": {"tier": "gold"}, "reason": "contract signed"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["credit_limit"], body["available"], body["metadata"]) == ("7.5", "9.5", {"tier": "gold"})
    assert body["balance"] == "2"
    assert account(client, account_id) == body
    entry = audit_of(client, account_id)[0]
    assert entry["action"] == "account.update"
    assert entry["reason"] == "contract signed"
    assert entry["role"] == "finance"
    assert entry["details"] == {
        "before": {"credit_limit": "0", "metadata": {}},
        "after": {"credit_limit": "7.5", "metadata": {"tier": "gold"}},
    }
    # metadata alone is replaced whole; the credit limit stays
    r = client.patch(
        f"/admin/v1/accounts/{account_id}", json={"metadata": {"x": 1}, "reason": "r"}, headers=auth(FINANCE)
    )
    assert (r.json()["credit_limit"], r.json()["metadata"]) == ("7.5", {"x": 1})
    assert audit_of(client, account_id)[0]["details"] == {
        "before": {"metadata": {"tier": "gold"}},
        "after": {"metadata": {"x": 1}},
    }
    # the same values again: 200, nothing recorded
    n = len(audit_of(client, account_id))
    r = client.patch(
        f"/admin/v1/accounts/{account_id}",
        json={"credit_limit": "7.50", "reason": "r"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200 and r.json()["credit_limit"] == "7.5"
    assert len(audit_of(client, account_id)) == n


def test_credit_limit_below_held_only_lowers_available(
    client: TestClient[Any], make_account: Any, world: dict[str, Any]
) -> None:
    """Decided: lowering the limit below what is held is allowed; nothing held is taken
    back, `available` goes below zero, further reserves get 402, the holds still settle."""
    account_id = make_account(credit_limit="1", currency=world["currency"])
    r = reserve(client, account_id, max_output_tokens=500)  # 0.007
    assert r.status_code == 201, r.text
    hold = r.json()
    r = client.patch(
        f"/admin/v1/accounts/{account_id}",
        json={"credit_limit": "0.001", "reason": "risk review"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200
    assert (r.json()["held"], r.json()["available"], r.json()["credit_limit"]) == ("0.007", "-0.006", "0.001")
    r = reserve(client, account_id, max_output_tokens=1)
    assert r.status_code == 402
    assert r.json()["error"]["available"] == "-0.006"
    r = client.post(
        f"/v1/holds/{hold['id']}/settle",
        json={"usage": {"prompt_tokens": 100, "completion_tokens": 10}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    assert account(client, account_id)["balance"] == "-0.0003"  # 100 x 2 / 1e6 + 10 x 10 / 1e6
    assert_integrity(client)


def test_patch_refusals_change_nothing(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("1")
    before = account(client, account_id)
    n = len(audit_of(client, account_id))
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({"credit_limit": "5"}, 422, "reason"),
        ({"credit_limit": "5", "reason": "  "}, 422, "reason"),
        ({"reason": "nothing to change"}, 422, "credit_limit"),
        ({"credit_limit": "-1", "reason": "r"}, 422, "credit_limit"),
        ({"credit_limit": 5, "reason": "r"}, 422, "credit_limit"),
        ({"credit_limit": "0.0000000000001", "reason": "r"}, 422, "credit_limit"),
        ({"credit_limit": "1" + "0" * 26, "reason": "r"}, 422, "credit_limit"),
        ({"credit_limit": None, "reason": "r"}, 422, "credit_limit"),
        ({"metadata": [], "reason": "r"}, 422, "metadata"),
        ({"metadata": {"k": "v" * 20_000}, "reason": "r"}, 422, "metadata"),
        ({"balance": "100", "reason": "r"}, 422, "balance"),
        ({"currency": "EUR", "reason": "r"}, 422, "currency"),
    ]
    for body, status, param in cases:
        r = client.patch(f"/admin/v1/accounts/{account_id}", json=body, headers=auth(FINANCE))
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.text)
    r = client.patch(
        f"/admin/v1/accounts/{account_id}", json={"credit_limit": "5", "reason": "r"}, headers=auth(VIEWER)
    )
    assert r.status_code == 403
    r = client.patch(
        "/admin/v1/accounts/nobody", json={"credit_limit": "5", "reason": "r"}, headers=auth(FINANCE)
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "account_not_found"
    assert account(client, account_id) == before
    assert len(audit_of(client, account_id)) == n


def test_direct_sql_may_change_only_the_control_columns(
    make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    account_id = make_account("5")

    def refused(statement: str, *params: Any) -> str:
        with pytest.raises(psycopg.Error) as caught:
            sql.execute(statement, (*params, account_id))
        sql.rollback()
        return str(caught.value)

    assert "only through journal entries" in refused("UPDATE accounts SET balance = 1000000 WHERE id = %s")
    assert "only through journal entries" in refused("UPDATE accounts SET held = 1 WHERE id = %s")
    assert "never change" in refused("UPDATE accounts SET currency = 'EUR' WHERE id = %s")
    assert "never change" in refused(
        "UPDATE accounts SET created_at = now() - interval '1 day' WHERE id = %s"
    )
    assert "accounts_frozen_pair" in refused("UPDATE accounts SET frozen_at = now() WHERE id = %s")
    # the allowed columns, together, are accepted (and rolled back here)
    sql.execute(
        "UPDATE accounts SET credit_limit = 3, metadata = '{\"a\": 1}', frozen_at = now(), "
        "frozen_reason = 'x' WHERE id = %s",
        (account_id,),
    )
    sql.rollback()
    # system accounts are not edited at all
    with pytest.raises(psycopg.Error) as caught:
        sql.execute("UPDATE accounts SET credit_limit = 1 WHERE id = 'system:funding:USD'")
    sql.rollback()
    assert "system accounts are not edited" in str(caught.value)
    row = sql.execute("SELECT balance, held, currency FROM accounts WHERE id = %s", (account_id,)).fetchone()
    assert row is not None and (row[0], row[1], row[2]) == (5, 0, "USD")


# --- freeze ------------------------------------------------------------------------


def test_frozen_account_refuses_reserves_but_settles_and_deposits_apply(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    open_hold = reserve(client, account_id, max_output_tokens=100).json()
    to_release = reserve(client, account_id, max_output_tokens=100).json()
    replayed_key = new_id("r")
    replayed = reserve(client, account_id, key=replayed_key, max_output_tokens=100).json()

    r = freeze(client, account_id)
    assert r.status_code == 200
    body = r.json()
    assert body["frozen"] is True and body["frozen_reason"] == "freeze for test" and body["frozen_at"]
    assert account(client, account_id) == body
    before = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()

    r = reserve(client, account_id, max_output_tokens=100)
    assert r.status_code == 403
    assert r.json() == {
        "error": {
            "type": "permission_error",
            "code": "account_frozen",
            "message": f"account {account_id!r} is frozen and takes no new reservations",
            "param": "account_id",
        }
    }
    assert client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json() == before
    # the replay of a hold made before the freeze is still its replay
    again = reserve(client, account_id, key=replayed_key, max_output_tokens=100)
    assert again.status_code == 200 and again.json()["id"] == replayed["id"]

    settled = client.post(
        f"/v1/holds/{open_hold['id']}/settle",
        json={"usage": {"prompt_tokens": 100, "completion_tokens": 10}},
        headers=auth(GATEWAY),
    )
    assert settled.status_code == 200, settled.text
    assert client.post(f"/v1/holds/{to_release['id']}/release", headers=auth(GATEWAY)).status_code == 200
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": new_id("d"), "amount": "3"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201
    r = client.post(
        f"/admin/v1/accounts/{account_id}/adjustments",
        json={"idempotency_key": new_id("a"), "amount": "-1", "reason": "fee"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201

    # idempotent both ways; unfreezing lets reserves through again
    n = len(audit_of(client, account_id))
    assert freeze(client, account_id).json()["frozen_at"] == body["frozen_at"]
    assert len(audit_of(client, account_id)) == n
    r = freeze(client, account_id, "unfreeze")
    assert r.status_code == 200 and r.json()["frozen"] is False and r.json()["frozen_at"] is None
    assert freeze(client, account_id, "unfreeze").status_code == 200
    actions = [e["action"] for e in audit_of(client, account_id)]
    assert actions[0] == "account.unfreeze"
    assert (actions.count("account.freeze"), actions.count("account.unfreeze")) == (1, 1)
    assert audit_of(client, account_id)[0]["reason"] == "unfreeze for test"
    assert reserve(client, account_id, max_output_tokens=100).status_code == 201
    assert_integrity(client)


def test_freeze_refusals(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account()
    assert freeze(client, account_id, token=VIEWER).status_code == 403
    assert freeze(client, account_id, token=ADMIN).status_code == 200
    for body in ({}, {"reason": " "}, {"reason": "r", "until": "tomorrow"}):
        r = client.post(f"/admin/v1/accounts/{account_id}/unfreeze", json=body, headers=auth(FINANCE))
        assert r.status_code == 422, r.text
    assert account(client, account_id)["frozen"] is True
    r = freeze(client, "nobody")
    assert r.status_code == 404 and r.json()["error"]["code"] == "account_not_found"


def test_a_freeze_committed_while_a_reserve_waits_is_seen(
    client: TestClient[Any], world: dict[str, Any], database: str
) -> None:
    """The frozen check reads the row the reserve locked, not an earlier snapshot: a
    reserve that queued behind the freeze's lock is refused once the freeze commits."""
    account_id = world["account"]
    result: dict[str, Any] = {}
    with psycopg.connect(database) as conn:
        conn.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (account_id,))
        conn.execute(
            "UPDATE accounts SET frozen_at = now(), frozen_reason = 'race' WHERE id = %s", (account_id,)
        )

        def run() -> None:
            result["response"] = reserve(client, account_id, max_output_tokens=100)

        worker = threading.Thread(target=run)
        worker.start()
        deadline = time.monotonic() + 10
        waiting = False
        with psycopg.connect(database, autocommit=True) as probe:
            while time.monotonic() < deadline and not waiting:
                row = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                ).fetchone()
                waiting = row is not None and row[0] > 0
                time.sleep(0.02)
        assert waiting, "the reserve never waited for the account lock"
        conn.commit()
    worker.join(10)
    r = result["response"]
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "account_frozen"
    assert account(client, account_id)["held"] == "0"


# --- below zero --------------------------------------------------------------------


def test_list_below_zero(client: TestClient[Any], make_account: Any) -> None:
    negative = [make_account() for _ in range(3)]
    positive = make_account("1")
    for account_id in negative:
        r = client.post(
            f"/admin/v1/accounts/{account_id}/adjustments",
            json={"idempotency_key": new_id("a"), "amount": "-0.5", "reason": "overage"},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"below_zero": "true", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/admin/v1/accounts", params=params, headers=auth(VIEWER)).json()
        seen += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    ids = [a["account_id"] for a in seen]
    assert set(negative) <= set(ids)
    assert positive not in ids
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    assert all(a["balance"].startswith("-") for a in seen)
    everyone = client.get(
        "/admin/v1/accounts", params={"below_zero": "false", "limit": 500}, headers=auth(VIEWER)
    )
    assert positive in [a["account_id"] for a in everyone.json()["data"]] or everyone.json()["next_cursor"]
    r = client.get("/admin/v1/accounts", params={"below_zero": "maybe"}, headers=auth(VIEWER))
    assert r.status_code in (400, 422)
