"""Statements (JSON and streamed CSV) and revenue reports against real PostgreSQL.

Prices: each test publishes its own sheet in a currency no other test uses, models
`t-a` (input 2, output 10 per 1M) and `t-b` (input 4, output 20), so every charge
below is computed by hand.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, VIEWER, auth, fresh_currency, new_id, publish, reserve

STATEMENT_KEYS = {"account_id", "currency", "from", "to", "opening", "closing", "totals", "entries"}


def document(currency: str) -> dict[str, Any]:
    def model(name: str, rate_in: str, rate_out: str) -> dict[str, Any]:
        return {
            "model": name,
            "max_input_tokens": 1000,
            "max_output_tokens": 500,
            "rates": {"input": rate_in, "output": rate_out},
        }

    return {
        "currency": currency,
        "source": "test sheet",
        "models": [model("t-a", "2", "10"), model("t-b", "4", "20")],
    }


@pytest.fixture
def currency(client: TestClient[Any]) -> str:
    code = fresh_currency()
    publish(client, document(code))
    return code


def open_account(client: TestClient[Any], currency: str, deposit: str = "10") -> str:
    account_id = new_id("stmt")
    r = client.post(
        "/admin/v1/accounts", json={"account_id": account_id, "currency": currency}, headers=auth(FINANCE)
    )
    assert r.status_code == 201
    if deposit:
        money(client, account_id, "deposits", deposit)
    return account_id


def money(client: TestClient[Any], account_id: str, kind: str, amount: str) -> None:
    body: dict[str, Any] = {"idempotency_key": new_id("k"), "amount": amount}
    if kind == "adjustments":
        body["reason"] = "test, with a comma\nand a newline"
    else:
        body["reference"] = "wire 42"
    r = client.post(f"/admin/v1/accounts/{account_id}/{kind}", json=body, headers=auth(FINANCE))
    assert r.status_code == 201, r.text


def charge(
    client: TestClient[Any], account_id: str, model: str, p: int, c: int, *, release: bool = False
) -> str:
    body = {
        "account_id": account_id,
        "idempotency_key": new_id("r"),
        "model": model,
        "max_output_tokens": 100,
    }
    r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
    assert r.status_code == 201, r.text
    hold_id: str = r.json()["id"]
    if release:
        r = client.post(f"/v1/holds/{hold_id}/release", headers=auth(GATEWAY))
    else:
        usage = {"usage": {"prompt_tokens": p, "completion_tokens": c}}
        r = client.post(f"/v1/holds/{hold_id}/settle", json=usage, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    return hold_id


def statement(client: TestClient[Any], account_id: str, **params: Any) -> dict[str, Any]:
    r = client.get(f"/admin/v1/accounts/{account_id}/statement", params=params, headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def statement_csv(
    client: TestClient[Any], account_id: str, headers: dict[str, str] | None = None, **params: Any
) -> list[dict[str, str]]:
    r = client.get(
        f"/admin/v1/accounts/{account_id}/statement",
        params=params,
        headers={**auth(VIEWER), **(headers or {})},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(r.text)))


def check_reconciles(body: dict[str, Any]) -> None:
    """opening + every amount = closing, the running balances chain, the totals agree."""
    balance, held = Decimal(body["opening"]["balance"]), Decimal(body["opening"]["held"])
    for entry in body["entries"]:
        balance += Decimal(entry["amount"])
        held += Decimal(entry["held_change"])
        assert (Decimal(entry["balance_after"]), Decimal(entry["held_after"])) == (balance, held)
    assert (balance, held) == (Decimal(body["closing"]["balance"]), Decimal(body["closing"]["held"]))
    totals = body["totals"]
    assert sum(t["count"] for t in totals.values()) == len(body["entries"])
    assert Decimal(body["opening"]["balance"]) + sum(Decimal(t["amount"]) for t in totals.values()) == balance
    for kind, total in totals.items():
        mine = [e for e in body["entries"] if e["kind"] == kind]
        assert total["count"] == len(mine)
        assert Decimal(total["amount"]) == sum(Decimal(e["amount"]) for e in mine)


def csv_matches_json(rows: list[dict[str, str]], body: dict[str, Any]) -> None:
    assert rows[0]["kind"] == "opening" and rows[-1]["kind"] == "closing"
    assert (rows[0]["balance_after"], rows[0]["held_after"]) == (
        body["opening"]["balance"],
        body["opening"]["held"],
    )
    assert (rows[-1]["balance_after"], rows[-1]["held_after"]) == (
        body["closing"]["balance"],
        body["closing"]["held"],
    )
    assert rows[-1]["time"] == body["to"]
    assert rows[0]["time"] == (body["from"] or "")
    expected = [{k: ("" if v is None else v) for k, v in e.items()} for e in body["entries"]]
    assert rows[1:-1] == expected


def test_statement_json_and_csv_reconcile(client: TestClient[Any], currency: str) -> None:
    account_id = open_account(client, currency, "10")
    money(client, account_id, "adjustments", "-0.25")
    hold_a = charge(client, account_id, "t-a", 100, 10)  # 0.0002 + 0.0001
    charge(client, account_id, "t-b", 0, 0, release=True)
    money(client, account_id, "deposits", "1.000000000001")

    body = statement(client, account_id)
    assert set(body) == STATEMENT_KEYS
    assert body["from"] is None and body["opening"] == {"balance": "0", "held": "0"}
    assert body["currency"] == currency
    assert body["closing"] == {"balance": "10.749700000001", "held": "0"}
    cached = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER)).json()
    assert body["closing"]["balance"] == cached["balance"]
    kinds = [e["kind"] for e in body["entries"]]
    assert kinds == ["deposit", "adjustment", "reserve", "settle", "reserve", "release", "deposit"]
    assert body["totals"]["settle"] == {"count": 1, "amount": "-0.0003", "held_change": "-0.003"}
    assert body["totals"]["reserve"] == {"count": 2, "amount": "0", "held_change": "0.009"}
    assert body["totals"]["deposit"]["amount"] == "11.000000000001"
    settle = body["entries"][3]
    assert (settle["hold_id"], settle["balance_after"], settle["held_after"]) == (hold_a, "9.7497", "0")
    assert body["entries"][1]["reason"] == "test, with a comma\nand a newline"
    assert body["entries"][0]["reference"] == "wire 42"
    check_reconciles(body)

    # CSV both ways of asking; it parses and says what the JSON says (for the same `to`)
    for rows in (
        statement_csv(client, account_id, format="csv", to=body["to"]),
        statement_csv(client, account_id, headers={"Accept": "text/csv"}, to=body["to"]),
    ):
        assert list(rows[0]) == [
            "time", "transaction_id", "kind", "amount", "held_change",
            "balance_after", "held_after", "hold_id", "reference", "reason",
        ]  # fmt: skip
        csv_matches_json(rows, body)
    # ?format=json wins over Accept
    r = client.get(
        f"/admin/v1/accounts/{account_id}/statement",
        params={"format": "json"},
        headers={**auth(VIEWER), "Accept": "text/csv"},
    )
    assert r.headers["content-type"].startswith("application/json")

    # a window: from the settle (inclusive) to the last deposit (exclusive)
    window = statement(client, account_id, **{"from": settle["time"], "to": body["entries"][6]["time"]})
    assert [e["kind"] for e in window["entries"]] == ["settle", "reserve", "release"]
    assert window["opening"] == {"balance": "9.75", "held": "0.003"}
    assert window["closing"] == {"balance": "9.7497", "held": "0"}
    check_reconciles(window)
    csv_matches_json(
        statement_csv(client, account_id, format="csv", **{"from": window["from"], "to": window["to"]}),
        window,
    )


def test_csv_is_streamed_in_batches(
    client: TestClient[Any], currency: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.reports import repository

    monkeypatch.setattr(repository, "STREAM_BATCH", 2)
    account_id = open_account(client, currency, "1")
    for _ in range(4):
        money(client, account_id, "adjustments", "0.1")
    body = statement(client, account_id)
    rows = statement_csv(client, account_id, format="csv", to=body["to"])
    assert len(rows) == 2 + 5
    csv_matches_json(rows, body)


def test_statement_refusals(client: TestClient[Any], currency: str) -> None:
    account_id = open_account(client, currency, "1")
    path = f"/admin/v1/accounts/{account_id}/statement"
    for fmt in ("json", "csv"):
        r = client.get("/admin/v1/accounts/nobody/statement", params={"format": fmt}, headers=auth(VIEWER))
        assert r.status_code == 404 and r.json()["error"]["code"] == "account_not_found"
        r = client.get(
            path,
            params={"from": "2026-01-02T00:00:00Z", "to": "2026-01-01", "format": fmt},
            headers=auth(VIEWER),
        )
        assert r.status_code == 422 and r.json()["error"]["param"] == "from"
        r = client.get(path, params={"from": "2999-01-01T00:00:00Z", "format": fmt}, headers=auth(VIEWER))
        assert r.status_code == 422 and r.json()["error"]["param"] == "from"
    for name in ("from", "to"):
        r = client.get(path, params={name: "yesterday"}, headers=auth(VIEWER))
        assert r.status_code == 422 and r.json()["error"]["param"] == name
    assert client.get(path, params={"format": "xml"}, headers=auth(VIEWER)).status_code in (400, 422)
    assert client.get(path, headers=auth(GATEWAY)).status_code == 403
    # a naive timestamp is UTC
    body = statement(client, account_id, to="2999-01-01T00:00:00")
    assert body["to"] == "2999-01-01T00:00:00Z"


# --- randomized reconciliation -----------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("deposits"),
            st.decimals(min_value=Decimal("0.000000000001"), max_value=Decimal("50"), places=12),
        ),
        st.tuples(
            st.just("adjustments"),
            st.decimals(min_value=Decimal("-20"), max_value=Decimal("20"), places=12).filter(
                lambda d: d != 0
            ),
        ),
        st.tuples(st.sampled_from(["t-a", "t-b"]), st.integers(0, 1000), st.integers(0, 100)),
        st.tuples(st.just("release")),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, cuts=st.lists(st.integers(0, 20), min_size=1, max_size=3))
def test_random_statements_reconcile(
    client: TestClient[Any], currency: str, ops: list[Any], cuts: list[int]
) -> None:
    account_id = open_account(client, currency, "5")
    for op in ops:
        if op[0] in ("deposits", "adjustments"):
            body = {"idempotency_key": new_id("k"), "amount": f"{op[1]:f}"}
            if op[0] == "adjustments":
                body["reason"] = "random"
            r = client.post(f"/admin/v1/accounts/{account_id}/{op[0]}", json=body, headers=auth(FINANCE))
            assert r.status_code == 201, r.text
        elif op[0] == "release":
            r = reserve(client, account_id, "t-a", max_output_tokens=1)
            if r.status_code == 201:
                client.post(f"/v1/holds/{r.json()['id']}/release", headers=auth(GATEWAY))
        else:
            body = {
                "account_id": account_id,
                "idempotency_key": new_id("r"),
                "model": op[0],
                "max_output_tokens": 100,
            }
            r = client.post("/v1/holds", json=body, headers=auth(GATEWAY))
            if r.status_code == 201:  # 402 when the random adjustments emptied the account
                usage = {"usage": {"prompt_tokens": op[1], "completion_tokens": op[2]}}
                assert (
                    client.post(
                        f"/v1/holds/{r.json()['id']}/settle", json=usage, headers=auth(GATEWAY)
                    ).status_code
                    == 200
                )
    whole = statement(client, account_id)
    check_reconciles(whole)
    cached = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER)).json()
    assert (whole["closing"]["balance"], whole["closing"]["held"]) == (cached["balance"], cached["held"])
    # consecutive windows chain: each closing is the next opening, and each reconciles
    times = sorted({e["time"] for e in whole["entries"]})
    bounds = sorted({times[c % len(times)] for c in cuts})
    edges: list[str | None] = [None, *bounds, whole["to"]]
    previous_closing = {"balance": "0", "held": "0"}
    n = 0
    for start, end in itertools.pairwise(edges):
        params = {"to": end} if start is None else {"from": start, "to": end}
        part = statement(client, account_id, **params)
        check_reconciles(part)
        assert part["opening"] == previous_closing
        previous_closing = part["closing"]
        n += len(part["entries"])
    assert previous_closing == whole["closing"]
    assert n == len(whole["entries"])


# --- revenue -----------------------------------------------------------------------


def revenue(client: TestClient[Any], **params: Any) -> dict[str, Any]:
    r = client.get("/admin/v1/reports/revenue", params=params, headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_revenue_by_model_account_and_day(client: TestClient[Any], currency: str, database: str) -> None:
    alice, bob = open_account(client, currency, "5"), open_account(client, currency, "5")
    charge(client, alice, "t-a", 100, 10)  # 0.0003
    charge(client, alice, "t-b", 100, 10)  # 0.0006
    charge(client, bob, "t-a", 500, 50)  # 0.0015
    charge(client, bob, "t-b", 0, 0, release=True)  # no revenue
    # a late true-up: admin settles with 100/10 (0.0003), the gateway's 100/40 arrives (0.0006)
    r = client.post(
        "/v1/holds",
        json={"account_id": bob, "idempotency_key": new_id("r"), "model": "t-a", "max_output_tokens": 100},
        headers=auth(GATEWAY),
    )
    hold = r.json()["id"]
    client.post(
        f"/admin/v1/holds/{hold}/settle",
        json={"reason": "stream lost", "usage": {"prompt_tokens": 100, "completion_tokens": 10}},
        headers=auth(FINANCE),
    )
    late = client.post(
        f"/v1/holds/{hold}/settle",
        json={"usage": {"prompt_tokens": 100, "completion_tokens": 40}},
        headers=auth(GATEWAY),
    )
    assert late.json()["true_up"] == "0.0003"

    by_model = revenue(client, currency=currency, group_by="model")
    assert by_model["total"] == "0.003"
    assert by_model["groups"] == [
        {"key": "t-a", "amount": "0.0024", "settles": 3, "true_ups": 1},
        {"key": "t-b", "amount": "0.0006", "settles": 1, "true_ups": 0},
    ]
    by_account = revenue(client, currency=currency, group_by="account", to=by_model["to"])
    assert {g["key"]: g["amount"] for g in by_account["groups"]} == {alice: "0.0009", bob: "0.0021"}
    by_day = revenue(client, currency=currency, group_by="day", to=by_model["to"])
    assert sum(Decimal(g["amount"]) for g in by_day["groups"]) == Decimal("0.003")
    for report in (by_model, by_account, by_day):
        assert sum(Decimal(g["amount"]) for g in report["groups"]) == Decimal(report["total"])
    # the total is what the revenue shards hold, by direct SQL
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT sum(amount) FROM journal_entries WHERE account_id LIKE %s",
            (f"system:revenue:{currency}:%",),
        ).fetchone()
    assert row is not None and row[0] == Decimal("0.003")
    # a window that ends before everything is empty; one after includes nothing new
    assert revenue(client, currency=currency, to="2000-01-01T00:00:00Z") == {
        "currency": currency,
        "group_by": "model",
        "from": None,
        "to": "2000-01-01T00:00:00Z",
        "total": "0",
        "groups": [],
    }
    assert revenue(client, currency=currency, **{"from": by_model["to"]})["total"] == "0"
    # CSV
    r = client.get(
        "/admin/v1/reports/revenue",
        params={"currency": currency, "format": "csv", "to": by_model["to"]},
        headers=auth(VIEWER),
    )
    assert r.headers["content-type"].startswith("text/csv")
    assert list(csv.reader(io.StringIO(r.text))) == [
        ["key", "amount", "settles", "true_ups"],
        ["t-a", "0.0024", "3", "1"],
        ["t-b", "0.0006", "1", "0"],
        ["total", "0.003", "", ""],
    ]


def test_revenue_refusals(client: TestClient[Any]) -> None:
    for params in ({"group_by": "week"}, {"currency": "usd"}, {"from": "2026-02-01", "to": "2026-01-01"}):
        r = client.get("/admin/v1/reports/revenue", params=params, headers=auth(VIEWER))
        assert r.status_code in (400, 422), (params, r.text)
        assert "error" in r.json()
    assert client.get("/admin/v1/reports/revenue", headers=auth(GATEWAY)).status_code == 403
    assert client.get("/admin/v1/reports/revenue").status_code == 401


def test_free_text_that_a_spreadsheet_would_run_is_quoted_in_csv(
    client: TestClient[Any], currency: str
) -> None:
    account_id = open_account(client, currency, "1")
    for key, reason in (("f1", "=HYPERLINK(1)"), ("f2", "-2+3"), ("f3", "plain, text")):
        r = client.post(
            f"/admin/v1/accounts/{account_id}/adjustments",
            json={"idempotency_key": key, "amount": "1", "reason": reason},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
    rows = statement_csv(client, account_id, format="csv")
    reasons = [row["reason"] for row in rows if row["kind"] == "adjustment"]
    assert reasons == ["'=HYPERLINK(1)", "'-2+3", "plain, text"]
    # JSON keeps the text exactly as recorded
    body = statement(client, account_id)
    assert [e["reason"] for e in body["entries"] if e["kind"] == "adjustment"] == [
        "=HYPERLINK(1)",
        "-2+3",
        "plain, text",
    ]


FORMULAS = [" =1+1", "\n=cmd", "\t@x", "+1", "-2", "\r-3", "  @SUM(A1)", "=HYPERLINK(1)"]
HARMLESS = ["plain, text", "wire 42", "a-b=c"]


def test_every_text_cell_that_a_spreadsheet_would_run_gets_an_apostrophe(
    client: TestClient[Any], currency: str
) -> None:
    """References and reasons, after blanks or line breaks too; amounts (negative ones
    included) stay numbers."""
    account_id = open_account(client, currency, "")
    for text in FORMULAS + HARMLESS:
        r = client.post(
            f"/admin/v1/accounts/{account_id}/deposits",
            json={"idempotency_key": new_id("k"), "amount": "2", "reference": text},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
        r = client.post(
            f"/admin/v1/accounts/{account_id}/adjustments",
            json={"idempotency_key": new_id("k"), "amount": "-1.5", "reason": text},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
    rows = statement_csv(client, account_id, format="csv")[1:-1]
    expected = ["'" + t for t in FORMULAS] + HARMLESS
    assert [r["reference"] for r in rows if r["kind"] == "deposit"] == expected
    assert [r["reason"] for r in rows if r["kind"] == "adjustment"] == expected
    assert {r["amount"] for r in rows} == {"2", "-1.5"}
    assert rows[-1]["balance_after"] == str(Decimal("0.5") * len(expected))
    # JSON keeps every text as recorded
    entries = statement(client, account_id)["entries"]
    assert [e["reference"] for e in entries if e["kind"] == "deposit"] == FORMULAS + HARMLESS


def test_revenue_keys_are_text_cells(client: TestClient[Any], sql: psycopg.Connection[Any]) -> None:
    """A model name a spreadsheet would run (from a version published before the name rule,
    written here by SQL) is a neutralised key in the revenue CSV; amounts stay numbers."""
    code = fresh_currency()
    legacy = document(code)
    legacy["models"][0]["model"] = "=HYPERLINK(1)"
    legacy["models"][1]["model"] = "@t-b"
    sql.execute(
        "INSERT INTO price_versions (content_hash, currency, effective_at, source, document, published_by) "
        "VALUES (%s, %s, now() - interval '1 minute', 'legacy', %s::jsonb, 'test')",
        (uuid.uuid4().hex * 2, code, json.dumps(legacy)),
    )
    sql.commit()
    account_id = open_account(client, code, "1")
    charge(client, account_id, "=HYPERLINK(1)", 100, 10)  # 0.0002 + 0.0001
    charge(client, account_id, "@t-b", 100, 10)  # 0.0004 + 0.0002
    r = client.get(
        "/admin/v1/reports/revenue", params={"currency": code, "format": "csv"}, headers=auth(VIEWER)
    )
    assert r.status_code == 200, r.text
    assert list(csv.reader(io.StringIO(r.text))) == [
        ["key", "amount", "settles", "true_ups"],
        ["'=HYPERLINK(1)", "0.0003", "1", "0"],
        ["'@t-b", "0.0006", "1", "0"],
        ["total", "0.0009", "", ""],
    ]
    keys = [g["key"] for g in revenue(client, currency=code)["groups"]]
    assert keys == ["=HYPERLINK(1)", "@t-b"]
