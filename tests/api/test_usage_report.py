"""The per-account usage report: by model, day and budget key, JSON and CSV, equal to the statement.

Against the real PostgreSQL. Prices: models `u-a` (input 2, output 10 per 1M tokens) and `u-b`
(input 4, output 20) in a currency of the test's own; cache reads and writes fall back to the
input rate, so every figure below is computed by hand. Periods are cut at real times the
database gave (a statement's `to`), between the operations.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import (
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

TOKENS = ("prompt", "completion", "cached_input", "cache_write", "cache_write_5m", "cache_write_1h")
CSV_HEADER = ["row", "key", "requests", *(f"{t}_tokens" for t in TOKENS), "cost"]


def sheet(client: TestClient[Any], *models: tuple[str, str, str]) -> str:
    """A fresh currency with these (model, input rate, output rate) published in it."""
    code = fresh_currency()
    publish(
        client,
        {
            "currency": code,
            "source": "test sheet",
            "models": [
                {
                    "model": name,
                    "max_input_tokens": 1000,
                    "max_output_tokens": 500,
                    "rates": {"input": rate_in, "output": rate_out},
                }
                for name, rate_in, rate_out in models
            ],
        },
    )
    return code


@pytest.fixture
def currency(client: TestClient[Any]) -> str:
    return sheet(client, ("u-a", "2", "10"), ("u-b", "4", "20"))


def account(client: TestClient[Any], currency: str) -> str:
    account_id = new_id("use")
    r = client.post(
        "/admin/v1/accounts", json={"account_id": account_id, "currency": currency}, headers=auth(FINANCE)
    )
    assert r.status_code == 201, r.text
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": new_id("dep"), "amount": "5"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    return account_id


def hold(client: TestClient[Any], account_id: str, model: str, budget_key: str | None = None) -> str:
    fields: dict[str, Any] = {"max_output_tokens": 100}
    if budget_key:
        fields["budget_key"] = budget_key
    r = reserve(client, account_id, model, **fields)
    assert r.status_code == 201, r.text
    hold_id: str = r.json()["id"]
    return hold_id


def settle(client: TestClient[Any], hold_id: str, body: dict[str, Any]) -> dict[str, Any]:
    r = call(client, hold_id, "settle", body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def report(client: TestClient[Any], account_id: str, **params: Any) -> dict[str, Any]:
    r = client.get(f"/admin/v1/accounts/{account_id}/usage", params=params, headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def report_csv(client: TestClient[Any], account_id: str, **params: Any) -> list[list[str]]:
    r = client.get(
        f"/admin/v1/accounts/{account_id}/usage", params={**params, "format": "csv"}, headers=auth(VIEWER)
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(r.text)))


def statement_charges(client: TestClient[Any], account_id: str, **params: Any) -> tuple[Decimal, str]:
    """Minus the statement's settle + true_up totals (its charges), and the statement's `to`."""
    r = client.get(f"/admin/v1/accounts/{account_id}/statement", params=params, headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body = r.json()
    kinds = body["totals"]
    total = -sum((Decimal(kinds[k]["amount"]) for k in ("settle", "true_up") if k in kinds), Decimal(0))
    return total, body["to"]


def as_csv(body: dict[str, Any]) -> list[list[str]]:
    """The JSON as the CSV must carry it: a `group` row per group (the no-key group's key an
    empty cell), then the `total` row (its key empty)."""

    def line(row: str, key: str | None, g: dict[str, Any]) -> list[str]:
        return [row, key or "", str(g["requests"]), *(str(g["tokens"][t]) for t in TOKENS), g["cost"]]

    return [
        CSV_HEADER,
        *(line("group", g["key"], g) for g in body["groups"]),
        line("total", None, body["totals"]),
    ]


def check(body: dict[str, Any]) -> None:
    """The groups sum to the totals exactly."""
    totals = body["totals"]
    assert sum((Decimal(g["cost"]) for g in body["groups"]), Decimal(0)) == Decimal(totals["cost"])
    assert sum(g["requests"] for g in body["groups"]) == totals["requests"]
    for t in TOKENS:
        assert sum(g["tokens"][t] for g in body["groups"]) == totals["tokens"][t]


def tokens(**counts: int) -> dict[str, int]:
    return {t: counts.get(t, 0) for t in TOKENS}


def test_usage_by_model_day_and_key_equals_the_statement(client: TestClient[Any], currency: str) -> None:
    account_id = account(client, currency)
    cached = usage(
        100,
        10,
        prompt_tokens_details={"cached_tokens": 20, "cache_write_tokens": 30},
        claude_cache_creation_5_m_tokens=10,
        claude_cache_creation_1_h_tokens=5,
    )
    settle(client, hold(client, account_id, "u-a", "=team"), cached)  # 100 x 2 + 10 x 10: 0.0003
    settle(client, hold(client, account_id, "u-b", "proj-y"), usage(100, 10))  # 0.0006
    call(client, hold(client, account_id, "u-b", "proj-y"), "release")  # no charge, no request
    admin_settled = hold(client, account_id, "u-a")
    r = client.post(
        f"/admin/v1/holds/{admin_settled}/settle",
        json={"reason": "stream lost", "usage": usage(100, 10)["usage"]},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200 and r.json()["cost"] == "0.0003"
    released_by_reconciler = hold(client, account_id, "u-b", "proj-y")
    assert call(client, released_by_reconciler, "interrupt").status_code == 200
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))  # grace 0 in the tests
    assert r.status_code in (200, 201), r.text
    first_charges, cut = statement_charges(client, account_id)
    assert first_charges == Decimal("0.0012")

    # after the cut: two late true-ups (one of a hold the reconciler released: its first charge)
    assert settle(client, admin_settled, usage(100, 40))["true_up"] == "0.0003"
    assert settle(client, released_by_reconciler, usage(200, 10))["true_up"] == "0.001"
    all_charges, end = statement_charges(client, account_id)
    assert all_charges == Decimal("0.0025")

    # the whole period, by model
    whole = report(client, account_id, to=end)
    assert (whole["account_id"], whole["currency"], whole["group_by"], whole["from"], whole["to"]) == (
        account_id,
        currency,
        "model",
        None,
        end,
    )
    cached_tokens = tokens(
        prompt=100, completion=10, cached_input=20, cache_write=15, cache_write_5m=10, cache_write_1h=5
    )
    assert whole["groups"] == [
        {
            "key": "u-a",
            "requests": 2,
            "tokens": {t: cached_tokens[t] + tokens(prompt=100, completion=40)[t] for t in TOKENS},
            "cost": "0.0009",
        },
        {"key": "u-b", "requests": 2, "tokens": tokens(prompt=300, completion=20), "cost": "0.0016"},
    ]
    assert Decimal(whole["totals"]["cost"]) == all_charges
    assert whole["totals"]["requests"] == 4
    check(whole)
    assert report_csv(client, account_id, to=end) == as_csv(whole)

    # cut in two at a time between the operations: each part equals the statement of its period,
    # and the parts add up to the whole (requests counted once, at a hold's first charge)
    before = report(client, account_id, to=cut)
    after = report(client, account_id, **{"from": cut, "to": end})
    assert (
        Decimal(before["totals"]["cost"]) == first_charges == statement_charges(client, account_id, to=cut)[0]
    )
    assert Decimal(after["totals"]["cost"]) == all_charges - first_charges
    assert statement_charges(client, account_id, **{"from": cut, "to": end})[0] == Decimal(
        after["totals"]["cost"]
    )
    assert {g["key"]: (g["requests"], g["cost"]) for g in after["groups"]} == {
        "u-a": (0, "0.0003"),  # the admin-settled hold's true-up: cost, no new request
        "u-b": (1, "0.001"),  # the reconciler released it: its true-up is its first charge
    }
    assert before["totals"]["requests"] + after["totals"]["requests"] == whole["totals"]["requests"]
    for part in (before, after):
        check(part)

    # by budget key: a key a spreadsheet would run is text in the CSV
    by_key = report(client, account_id, group_by="budget_key", to=end)
    assert {g["key"]: (g["requests"], g["cost"]) for g in by_key["groups"]} == {
        None: (1, "0.0006"),  # the holds without a budget key
        "=team": (1, "0.0003"),
        "proj-y": (2, "0.0016"),
    }
    check(by_key)
    rows = report_csv(client, account_id, group_by="budget_key", to=end)
    assert rows == [row if row[1] != "=team" else [row[0], "'=team", *row[2:]] for row in as_csv(by_key)]
    assert Decimal(by_key["totals"]["cost"]) == all_charges

    # by day (UTC, by transaction time): the days add up to the same total
    by_day = report(client, account_id, group_by="day", to=end)
    check(by_day)
    assert by_day["totals"] == whole["totals"]
    assert all(len(g["key"]) == 10 for g in by_day["groups"])
    assert report_csv(client, account_id, group_by="day", to=end) == as_csv(by_day)

    # Accept: text/csv asks for CSV too; a period before any charge is empty
    r = client.get(
        f"/admin/v1/accounts/{account_id}/usage",
        params={"to": end},
        headers={**auth(VIEWER), "Accept": "text/csv"},
    )
    assert list(csv.reader(io.StringIO(r.text))) == as_csv(whole)
    empty = report(client, account_id, to="2000-01-01T00:00:00Z")
    assert empty["groups"] == [] and empty["totals"] == {"requests": 0, "tokens": tokens(), "cost": "0"}


def test_usage_report_refusals(client: TestClient[Any], currency: str) -> None:
    account_id = account(client, currency)
    path = f"/admin/v1/accounts/{account_id}/usage"
    for fmt in ("json", "csv"):
        r = client.get("/admin/v1/accounts/nobody-here/usage", params={"format": fmt}, headers=auth(VIEWER))
        assert r.status_code == 404 and r.json()["error"]["code"] == "account_not_found"
        for period in (
            {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
            {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
            {"from": "2999-01-01T00:00:00Z"},  # to defaults to now
        ):
            r = client.get(path, params={**period, "format": fmt}, headers=auth(VIEWER))
            assert r.status_code == 422 and r.json()["error"]["param"] == "from", r.text
    for params, param in (
        ({"group_by": "week"}, "group_by"),
        ({"from": "yesterday"}, "from"),
        ({"to": "0.5"}, "to"),
    ):
        r = client.get(path, params=params, headers=auth(VIEWER))
        assert r.status_code == 422 and r.json()["error"]["param"] == param, r.text
    assert client.get(path, params={"format": "xml"}, headers=auth(VIEWER)).status_code == 422
    assert client.get(path, headers=auth(GATEWAY)).status_code == 403
    assert client.get(path).status_code == 401


def journaled(client: TestClient[Any], account_id: str, hold_id: str) -> list[str]:
    """The kinds of the account's journal transactions for this hold (a statement's entries)."""
    r = client.get(f"/admin/v1/accounts/{account_id}/statement", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    return [e["kind"] for e in r.json()["entries"] if e["hold_id"] == hold_id]


def test_free_requests_are_counted_though_nothing_is_journaled(client: TestClient[Any]) -> None:
    """A settle of charge 0 on a hold of 0 writes no transaction; the request and its tokens
    still count (at the hold's resolved_at), at cost 0, and the cost still equals the statement."""
    code = sheet(client, ("u-a", "2", "10"), ("u-free", "0", "0"))
    paying = account(client, code)

    free = hold(client, paying, "u-free", "k-free")  # a model priced at 0
    answer = settle(client, free, usage(100, 10))
    assert (answer["amount"], answer["cost"]) == ("0", "0")
    settle(client, hold(client, paying, "u-a"), usage(100, 10))  # 0.0003
    first_charges, cut = statement_charges(client, paying)
    later_free = hold(client, paying, "u-free")
    settle(client, later_free, usage(50, 5))
    all_charges, end = statement_charges(client, paying)
    assert journaled(client, paying, free) == journaled(client, paying, later_free) == []
    assert first_charges == all_charges == Decimal("0.0003")

    whole = report(client, paying, to=end)
    assert whole["groups"] == [
        {"key": "u-a", "requests": 1, "tokens": tokens(prompt=100, completion=10), "cost": "0.0003"},
        {"key": "u-free", "requests": 2, "tokens": tokens(prompt=150, completion=15), "cost": "0"},
    ]
    assert (whole["totals"]["requests"], Decimal(whole["totals"]["cost"])) == (3, all_charges)
    check(whole)
    assert report_csv(client, paying, to=end) == as_csv(whole)
    # each free request in the period it was settled in, once
    before = report(client, paying, to=cut)
    after = report(client, paying, **{"from": cut, "to": end})
    assert {g["key"]: (g["requests"], g["cost"]) for g in before["groups"]} == {
        "u-a": (1, "0.0003"),
        "u-free": (1, "0"),
    }
    assert after["groups"] == [
        {"key": "u-free", "requests": 1, "tokens": tokens(prompt=50, completion=5), "cost": "0"}
    ]
    by_key = report(client, paying, group_by="budget_key", to=end)
    assert {g["key"]: (g["requests"], g["cost"]) for g in by_key["groups"]} == {
        "k-free": (1, "0"),
        None: (2, "0.0003"),
    }
    by_day = report(client, paying, group_by="day", to=end)
    assert by_day["totals"] == whole["totals"]
    check(by_day)

    # an account on a -100% plan: every model is free for it
    planned = account(client, code)
    plan_id = new_id("free")
    r = client.post(
        "/admin/v1/plans",
        json={"plan_id": plan_id, "currency": code, "document": {"adjust_percent": "-100"}, "reason": "t"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    r = client.put(
        f"/admin/v1/accounts/{planned}/plan", json={"plan_id": plan_id, "reason": "t"}, headers=auth(FINANCE)
    )
    assert r.status_code == 200, r.text
    on_plan = hold(client, planned, "u-a")
    assert settle(client, on_plan, usage(100, 10))["cost"] == "0"
    # released, or not yet settled: no request
    call(client, hold(client, planned, "u-a"), "release")
    hold(client, planned, "u-a")
    charges, end = statement_charges(client, planned)
    assert journaled(client, planned, on_plan) == [] and charges == 0
    body = report(client, planned, to=end)
    assert body["groups"] == [
        {"key": "u-a", "requests": 1, "tokens": tokens(prompt=100, completion=10), "cost": "0"}
    ]
    assert body["totals"]["cost"] == "0"


def test_no_key_tells_for_the_no_key_group_or_the_total(client: TestClient[Any]) -> None:
    """A budget key `(none)` or `total` and a model `total` are groups like any other: the holds
    without a key are the group whose key is null (an empty key cell in the CSV), and the CSV's
    totals are the row marked `total` in the `row` column."""
    code = sheet(client, ("total", "2", "10"), ("u-a", "4", "20"))
    account_id = account(client, code)
    settle(client, hold(client, account_id, "total", "(none)"), usage(100, 10))  # 0.0003
    settle(client, hold(client, account_id, "u-a", "total"), usage(100, 10))  # 0.0006
    settle(client, hold(client, account_id, "u-a"), usage(100, 10))  # 0.0006
    _, end = statement_charges(client, account_id)

    by_key = report(client, account_id, group_by="budget_key", to=end)
    assert {g["key"]: (g["requests"], g["cost"]) for g in by_key["groups"]} == {
        "(none)": (1, "0.0003"),
        "total": (1, "0.0006"),
        None: (1, "0.0006"),
    }
    rows = report_csv(client, account_id, group_by="budget_key", to=end)
    assert rows == as_csv(by_key)
    assert sorted(row[:3] for row in rows[1:]) == [
        ["group", "", "1"],
        ["group", "(none)", "1"],
        ["group", "total", "1"],
        ["total", "", "3"],
    ]
    assert rows[-1][0] == "total"

    by_model = report(client, account_id, to=end)
    assert {g["key"]: g["cost"] for g in by_model["groups"]} == {"total": "0.0003", "u-a": "0.0012"}
    rows = report_csv(client, account_id, to=end)
    assert rows == as_csv(by_model)
    assert [row[:2] for row in rows[1:]] == [["group", "total"], ["group", "u-a"], ["total", ""]]
