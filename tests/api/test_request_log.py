"""The request log: a hold's `cost`, a hold found by the gateway's request id, the admin list's filters.

Against the real PostgreSQL. Prices: `simple_document` (`t-simple`, input 2, output 10 per
1M tokens) in a currency of the test's own, so every cost below is computed by hand.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import psycopg
from litestar.testing import TestClient

from tests.conftest import (
    ADMIN,
    FINANCE,
    GATEWAY,
    VIEWER,
    auth,
    call,
    fresh_currency,
    new_id,
    publish,
    reserve,
    usage,
)


def journal_cost(sql: psycopg.Connection[Any], hold: dict[str, Any]) -> Decimal:
    """What the journal charged the hold's account for it: minus its settle and true-up entries."""
    row = sql.execute(
        "SELECT coalesce(sum(e.amount), 0) FROM journal_entries e "
        "JOIN journal_transactions t ON t.id = e.transaction_id "
        "WHERE t.hold_id = %s AND t.kind IN ('settle', 'true_up') AND e.account_id = %s",
        (hold["id"], hold["account_id"]),
    ).fetchone()
    sql.commit()
    assert row is not None
    return -Decimal(row[0])


def reconcile(client: TestClient[Any]) -> None:
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))
    assert r.status_code in (200, 201), r.text


def get(client: TestClient[Any], hold_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/holds/{hold_id}", headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


# --- cost -----------------------------------------------------------------------------------


def test_cost_is_what_the_journal_charged_for_the_hold(
    client: TestClient[Any], world: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    account_id = world["account"]

    # a plain settle (fast lane): the charge
    settled = reserve(client, account_id, max_output_tokens=100).json()
    assert settled["cost"] is None  # open: no cost yet
    r = call(client, settled["id"], "settle", usage(100, 10))
    assert r.status_code == 200 and r.json()["cost"] == "0.0003"
    assert call(client, settled["id"], "settle", usage(100, 10)).json()["cost"] == "0.0003"  # replay

    # released by the gateway: "0"
    released = reserve(client, account_id, max_output_tokens=100).json()
    assert call(client, released["id"], "release").json()["cost"] == "0"

    # interrupted: still no cost; the reconciler settles it with the usage seen, then the
    # gateway's authoritative usage arrives: a true-up, and the cost is the final charge
    late = reserve(client, account_id, max_output_tokens=100).json()
    assert call(client, late["id"], "interrupt", usage(100, 10)).json()["cost"] is None
    # interrupted without usage: the reconciler releases it, and a late settle trues it up
    silent = reserve(client, account_id, max_output_tokens=100).json()
    assert call(client, silent["id"], "interrupt").json()["cost"] is None
    reconcile(client)  # LEDGER_RECONCILE_GRACE_SECONDS=0 in the tests: both are due
    assert get(client, late["id"])["resolved_by"] == "reconciler"
    assert get(client, late["id"])["cost"] == "0.0003"
    assert (get(client, silent["id"])["state"], get(client, silent["id"])["cost"]) == ("released", "0")
    trued = call(client, late["id"], "settle", usage(100, 40)).json()
    assert (trued["true_up"], trued["cost"]) == ("0.0003", "0.0006")
    trued = call(client, silent["id"], "settle", usage(100, 10)).json()
    assert (trued["state"], trued["true_up"], trued["cost"]) == ("settled", "0.0003", "0.0003")

    # an admin settle, then a lower gateway usage: a refund true-up lowers the cost
    refunded = reserve(client, account_id, max_output_tokens=100).json()
    r = client.post(
        f"/admin/v1/holds/{refunded['id']}/settle",
        json={"reason": "stream lost", "usage": usage(100, 40)["usage"]},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200 and r.json()["cost"] == "0.0006"
    trued = call(client, refunded["id"], "settle", usage(100, 10)).json()
    assert (trued["true_up"], trued["cost"]) == ("-0.0003", "0.0003")

    for hold in (settled, released, late, silent, refunded):
        shown = get(client, hold["id"])
        assert Decimal(shown["cost"]) == journal_cost(sql, hold), shown
        admin = client.get(f"/admin/v1/holds/{hold['id']}", headers=auth(VIEWER)).json()
        assert admin["cost"] == shown["cost"]


# --- by the gateway's request id ---------------------------------------------------------------


def by_key(
    client: TestClient[Any], account_id: str, key: Any, token: str = GATEWAY, admin: bool = False
) -> Any:
    prefix = "/admin/v1" if admin else "/v1"
    params = {} if key is None else {"idempotency_key": key}
    return client.get(
        f"{prefix}/accounts/{quote(account_id, safe='')}/holds/by-key", params=params, headers=auth(token)
    )


def test_a_hold_is_found_by_account_and_idempotency_key(
    client: TestClient[Any], world: dict[str, Any], make_account: Any
) -> None:
    account_id = world["account"]
    other = make_account("1", currency=world["currency"])
    key = f"req {uuid.uuid4().hex} /?&=#é"  # any 1..255 characters, as a reserve takes them
    hold = reserve(client, account_id, key=key, max_output_tokens=100).json()
    twin = reserve(client, other, key=key, max_output_tokens=100).json()  # same key, other account
    assert twin["id"] != hold["id"]
    settled = call(client, hold["id"], "settle", usage(100, 10)).json()

    for admin, token in ((False, GATEWAY), (True, VIEWER), (True, ADMIN)):
        r = by_key(client, account_id, key, token, admin)
        assert r.status_code == 200, r.text
        assert r.json() == settled  # the same hold, with its cost
        assert by_key(client, other, key, token, admin).json()["id"] == twin["id"]
        # none under this account and key: 404 hold_not_found (an unknown account too)
        for account, missing in ((account_id, "nope"), (account_id, key.upper()), ("nobody-here", key)):
            r = by_key(client, account, missing, token, admin)
            assert r.status_code == 404 and r.json()["error"]["code"] == "hold_not_found", r.text
        # the key is checked as a reserve checks it
        for bad in (None, "", "k" * 256):
            r = by_key(client, account_id, bad, token, admin)
            assert r.status_code == 422, r.text
            assert r.json()["error"]["param"] == "idempotency_key"
    assert by_key(client, account_id, "k" * 255).status_code == 404  # the longest key is a key

    # the key sent in the Idempotency-Key header is the same request id
    header_key = new_id("hdr")
    body = {"account_id": account_id, "model": "t-simple", "max_output_tokens": 100}
    made = client.post("/v1/holds", json=body, headers={**auth(GATEWAY), "Idempotency-Key": header_key})
    assert made.status_code == 201
    assert by_key(client, account_id, header_key).json()["id"] == made.json()["id"]

    # each surface takes its own tokens only
    assert by_key(client, account_id, key, VIEWER).status_code == 403
    assert by_key(client, account_id, key, GATEWAY, admin=True).status_code == 403
    assert (
        client.get(f"/v1/accounts/{account_id}/holds/by-key", params={"idempotency_key": key}).status_code
        == 401
    )


# --- the admin list's filters ---------------------------------------------------------------------


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def listed(client: TestClient[Any], limit: int = 2, **params: Any) -> list[dict[str, Any]]:
    """Every page of GET /admin/v1/holds, following the cursor."""
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        r = client.get("/admin/v1/holds", params=query, headers=auth(VIEWER))
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["data"]) <= limit
        seen.extend(body["data"])
        cursor = body["next_cursor"]
        if cursor is None:
            return seen


def test_admin_list_filters_page_through_every_combination(
    client: TestClient[Any], make_account: Any
) -> None:
    currency = fresh_currency()
    tag = uuid.uuid4().hex[:8]
    models = [f"m-{tag}-a", f"m-{tag}-b"]
    document = {
        "currency": currency,
        "source": "test sheet",
        "models": [
            {
                "model": m,
                "max_input_tokens": 1000,
                "max_output_tokens": 500,
                "rates": {"input": "2", "output": "10"},
            }
            for m in models
        ],
    }
    publish(client, document)
    accounts = [make_account("5", currency=currency), make_account("5", currency=currency)]
    teams: list[Any] = ["red", "blue", 1, "1", None]
    holds: list[dict[str, Any]] = []
    for i in range(14):
        metadata: dict[str, Any] = {"n": i}
        if teams[i % 5] is not None:
            metadata["team"] = teams[i % 5]
        fields: dict[str, Any] = {"max_output_tokens": 10, "metadata": metadata}
        if i % 3:
            fields["budget_key"] = f"key-{i % 3}"
        r = reserve(client, accounts[i % 2], models[(i // 2) % 2], **fields)
        assert r.status_code == 201, r.text
        holds.append(r.json())
    call(client, holds[0]["id"], "release")
    call(client, holds[1]["id"], "settle", usage(10, 1))
    holds = [get(client, h["id"]) for h in holds]
    ids = {h["id"] for h in holds}
    times = sorted((h["created_at"] for h in holds), key=when)
    start, end = times[3], times[10]

    def wanted(h: dict[str, Any], f: dict[str, Any]) -> bool:
        checks = {
            "account_id": lambda v: h["account_id"] == v,
            "model": lambda v: h["model"] == v,
            "budget_key": lambda v: h["budget_key"] == v,
            "state": lambda v: h["state"] == v,
            "from": lambda v: when(h["created_at"]) >= when(v),
            "to": lambda v: when(h["created_at"]) < when(v),
            "metadata_key": lambda v: v in h["metadata"] and h["metadata"][v] == f["metadata_value"],
            "metadata_value": lambda v: True,
        }
        return all(checks[k](v) for k, v in f.items())

    options: dict[str, list[Any]] = {
        "model": [None, *models],
        "budget_key": [None, "key-1", "key-2"],
        "time": [None, ("from", start), ("to", end), ("both", (start, end))],
        "metadata": [None, "red", "1"],  # "1": the string, never the number 1
        "extra": [None, ("account_id", accounts[1]), ("state", "open")],
    }
    checked = 0
    for model, key, time, team, extra in itertools.product(*options.values()):
        if model is None and key is None:
            continue  # the model (unique to this test) or the key scopes the list to this test's holds
        f: dict[str, Any] = {}
        if model:
            f["model"] = model
        if key:
            f["budget_key"] = key
            if not model:
                f["model"] = models[0]  # keys are not unique to the test; its models are
        if time:
            if time[0] == "both":
                f["from"], f["to"] = time[1]
            else:
                f[time[0]] = time[1]
        if team:
            f["metadata_key"], f["metadata_value"] = "team", team
        if extra:
            f[extra[0]] = extra[1]
        expected = [h["id"] for h in sorted(holds, key=lambda h: h["id"]) if wanted(h, f)]
        got = [h["id"] for h in listed(client, **f)]
        assert got == expected, f  # by id, each once, none missing, across pages of 2
        assert set(got) <= ids
        checked += bool(expected)
    assert checked > 50
    # the metadata filter alone, with the model: a nested or numeric value never matches a string
    assert [
        h["metadata"]["n"]
        for h in listed(client, 3, model=models[0], metadata_key="team", metadata_value="1")
    ] == [
        h["metadata"]["n"]
        for h in sorted(holds, key=lambda h: h["id"])
        if h["model"] == models[0] and h["metadata"].get("team") == "1"
    ]


def test_admin_list_filter_refusals(client: TestClient[Any]) -> None:
    cases = [
        ({"metadata_key": "team"}, "metadata_value"),
        ({"metadata_value": "red"}, "metadata_key"),
        ({"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from"),
        ({"from": "yesterday"}, "from"),
        ({"to": "1700000000"}, "to"),
        ({"model": ""}, "model"),
        ({"budget_key": "k" * 129}, "budget_key"),
    ]
    for params, param in cases:
        r = client.get("/admin/v1/holds", params=params, headers=auth(VIEWER))
        assert r.status_code == 422, (params, r.text)
        assert r.json()["error"]["param"] == param, (params, r.text)
    r = client.get(
        "/admin/v1/holds",
        params={
            "from": "2026-01-01",
            "to": "2026-01-02",
            "model": "none-such",
            "metadata_key": "a",
            "metadata_value": "",
        },
        headers=auth(VIEWER),
    )
    assert r.status_code == 200 and r.json() == {"data": [], "next_cursor": None}
