"""Query parameters: unknown or repeated keys are refused on every route, and the filters work.

The route list comes from the application itself, so a route added later is
covered without touching this file.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import psycopg
import pytest
from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import TestClient

from ledger.accounts.controller import JournalKind
from ledger.http.admission import admit
from ledger.journal.repository import KINDS
from tests.conftest import ADMIN, FINANCE, GATEWAY, VIEWER, auth, new_id


def every_route(app: Litestar) -> list[tuple[str, str]]:
    found = []
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for method in sorted(route.route_handler_map):
                if method not in ("HEAD", "OPTIONS"):
                    found.append((method, route.path))
    return found


def token_for(path: str) -> dict[str, str]:
    if path.startswith("/admin/"):
        return auth(ADMIN)
    if path.startswith("/v1/"):
        return auth(GATEWAY)
    return {}


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def test_every_handler_runs_the_admission_hook(app: Litestar) -> None:
    """No layer below the app may replace `before_request` (Litestar runs only the innermost)."""
    handlers = [h for route in app.routes if isinstance(route, HTTPRoute) for h in route.route_handlers]
    assert len(handlers) > 20
    for handler in handlers:
        resolved = handler.resolve_before_request()
        assert resolved is admit or getattr(resolved, "__wrapped__", None) is admit, handler
        assert all(layer.before_request is None for layer in handler.ownership_layers[1:]), handler


def test_unknown_query_parameter_is_422_on_every_route(client: TestClient[Any], app: Litestar) -> None:
    routes = every_route(app)
    assert ("GET", "/admin/v1/accounts/{account_id:str}/transactions") in routes
    for method, path in routes:
        if path.startswith("/console"):
            continue  # HTML pages behind a session cookie: tests/console covers them
        url = concrete(path) + "?bogus=1"
        r = client.request(method, url, headers=token_for(path), json={} if method == "POST" else None)
        assert r.status_code == 422, (method, path, r.text)
        assert r.json()["error"]["param"] == "bogus", (method, path, r.text)
        assert r.json()["error"]["code"] == "validation_error"


@pytest.mark.parametrize(
    ("url", "param"),
    [
        ("/admin/v1/accounts/{a}/transactions?from=2026-01-01T00:00:00Z", None),
        ("/admin/v1/accounts/{a}/transactions?q=deposit", "q"),
        ("/admin/v1/audit-log?action=account.deposit", None),
        ("/admin/v1/audit-log?actions=account.deposit", "actions"),
        ("/admin/v1/holds?status=open", "status"),
        ("/admin/v1/accounts/{a}/balance?asof=2026-01-01", "asof"),
    ],
)
def test_misspelt_filters_are_refused_not_ignored(
    client: TestClient[Any], make_account: Any, url: str, param: str | None
) -> None:
    r = client.get(url.format(a=make_account("1")), headers=auth(VIEWER))
    if param is None:
        assert r.status_code == 200, r.text
    else:
        assert (r.status_code, r.json()["error"]["param"]) == (422, param), r.text


@pytest.mark.parametrize(
    "url",
    [
        "/admin/v1/accounts?limit=1&limit=2",
        "/admin/v1/accounts/{a}/transactions?kind=deposit&kind=settle",
        "/admin/v1/audit-log?target={a}&target=other",
        "/admin/v1/holds?state=open&state=settled",
        "/admin/v1/accounts/{a}/balance?as_of=2026-01-01T00:00:00Z&as_of=2030-01-01T00:00:00Z",
    ],
)
def test_repeated_parameters_are_422(client: TestClient[Any], make_account: Any, url: str) -> None:
    r = client.get(url.format(a=make_account()), headers=auth(VIEWER))
    assert r.status_code == 422, r.text
    key = url.split("?")[1].split("=")[0]
    assert r.json()["error"]["param"] == key


@pytest.mark.parametrize(
    ("url", "param"),
    [
        ("/admin/v1/accounts/{a}/transactions?from=yesterday", "from"),
        ("/admin/v1/accounts/{a}/transactions?to=2026-13-01T00:00:00Z", "to"),
        ("/admin/v1/accounts/{a}/transactions?kind=deposits", "kind"),
        ("/admin/v1/accounts/{a}/transactions?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", "to"),
        ("/admin/v1/accounts/{a}/transactions?from=0001-01-01T00:00:00%2B05:00", "from"),
        ("/admin/v1/accounts/{a}/transactions?cursor=abc", "cursor"),
        ("/admin/v1/accounts/{a}/transactions?cursor=99999999999999999999", "cursor"),
        ("/admin/v1/accounts/{a}/transactions?cursor=%C2%B2", "cursor"),
        ("/admin/v1/audit-log?action=deposit", "action"),
        ("/admin/v1/audit-log?actor=fin", "actor"),
        ("/admin/v1/audit-log?from=nope", "from"),
        ("/admin/v1/audit-log?to=9999-12-31T23:59:59-10:00", "to"),
        ("/admin/v1/audit-log?cursor=12x", "cursor"),
        ("/admin/v1/audit-log?cursor=99999999999999999999", "cursor"),
        ("/admin/v1/holds?cursor=not-a-uuid", "cursor"),
        ("/admin/v1/holds?older_than_seconds=99999999999999", "older_than_seconds"),
        ("/admin/v1/holds?state=closed", "state"),
        ("/admin/v1/price-versions?cursor=v99999999999999999999", "cursor"),
        ("/admin/v1/price-versions?cursor=latest", "cursor"),
        ("/admin/v1/accounts?limit=0", "limit"),
    ],
)
def test_invalid_filter_values_are_422_naming_the_parameter(
    client: TestClient[Any], make_account: Any, url: str, param: str
) -> None:
    r = client.get(url.format(a=make_account()), headers=auth(VIEWER))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_the_declared_vocabularies_match_what_the_service_writes() -> None:
    assert set(get_args(JournalKind)) == set(KINDS)


def test_transaction_filters_by_kind_and_time(client: TestClient[Any], make_account: Any) -> None:
    account = make_account("10")
    for amount in ("1", "-2"):
        r = client.post(
            f"/admin/v1/accounts/{account}/adjustments",
            json={"idempotency_key": new_id("a"), "amount": amount, "reason": "test"},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
    url = f"/admin/v1/accounts/{account}/transactions"
    everything = client.get(url, headers=auth(VIEWER)).json()["data"]
    assert [t["kind"] for t in everything] == ["adjustment", "adjustment", "deposit"]
    assert [t["balance_after"] for t in everything] == ["9", "11", "10"]

    adjustments = client.get(url, params={"kind": "adjustment"}, headers=auth(VIEWER)).json()["data"]
    assert [(t["amount"], t["balance_after"]) for t in adjustments] == [("-2", "9"), ("1", "11")]
    deposits = client.get(url, params={"kind": "deposit"}, headers=auth(VIEWER)).json()
    assert [t["amount"] for t in deposits["data"]] == ["10"]
    assert client.get(url, params={"kind": "settle"}, headers=auth(VIEWER)).json()["data"] == []

    # [from, to): the second adjustment's own timestamp starts a range holding exactly it
    newest = everything[0]["created_at"]
    since = client.get(url, params={"from": newest}, headers=auth(VIEWER)).json()["data"]
    assert [t["transaction_id"] for t in since] == [everything[0]["transaction_id"]]
    until = client.get(url, params={"to": newest}, headers=auth(VIEWER)).json()["data"]
    assert [t["transaction_id"] for t in until] == [t["transaction_id"] for t in everything[1:]]
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert client.get(url, params={"from": future}, headers=auth(VIEWER)).json()["data"] == []
    # filters combine with the cursor
    page = client.get(url, params={"kind": "adjustment", "limit": 1}, headers=auth(VIEWER)).json()
    assert [t["amount"] for t in page["data"]] == ["-2"]
    rest = client.get(
        url, params={"kind": "adjustment", "limit": 1, "cursor": page["next_cursor"]}, headers=auth(VIEWER)
    ).json()
    assert [t["amount"] for t in rest["data"]] == ["1"]
    assert rest["next_cursor"] is None


def test_audit_log_filters_by_action_actor_and_time(
    client: TestClient[Any], make_account: Any, database: str
) -> None:
    account = make_account("3")
    url = "/admin/v1/audit-log"
    deposits = client.get(url, params={"target": account, "action": "account.deposit"}, headers=auth(VIEWER))
    assert deposits.status_code == 200, deposits.text
    rows = deposits.json()["data"]
    assert [(r["action"], r["details"]["amount"]) for r in rows] == [("account.deposit", "3")]
    creates = client.get(
        url, params={"target": account, "action": "account.create"}, headers=auth(VIEWER)
    ).json()
    assert [r["action"] for r in creates["data"]] == ["account.create"]
    identity = rows[0]["actor"]
    assert identity.startswith("finance:")
    mine = client.get(url, params={"actor": identity, "target": account}, headers=auth(VIEWER)).json()["data"]
    assert {r["action"] for r in mine} == {"account.create", "account.deposit"}
    by_role = client.get(url, params={"actor": "finance", "target": account}, headers=auth(VIEWER)).json()[
        "data"
    ]
    assert len(by_role) == 2
    assert (
        client.get(url, params={"actor": "admin", "target": account}, headers=auth(VIEWER)).json()["data"]
        == []
    )
    at = rows[0]["at"]
    since = client.get(url, params={"from": at, "target": account}, headers=auth(VIEWER)).json()["data"]
    assert [r["action"] for r in since] == ["account.deposit"]
    before = client.get(url, params={"to": at, "target": account}, headers=auth(VIEWER)).json()["data"]
    assert [r["action"] for r in before] == ["account.create"]
    with psycopg.connect(database) as conn:
        total = conn.execute("SELECT count(*) FROM audit_log WHERE action = 'account.deposit'").fetchone()
    everything = client.get(
        url, params={"action": "account.deposit", "limit": 500}, headers=auth(VIEWER)
    ).json()
    assert total is not None and len(everything["data"]) == min(total[0], 500)
    assert all(r["action"] == "account.deposit" for r in everything["data"])


NUMBERS = ("0.5", "1700000000", "0", "-1", "1e9")
TIMESTAMP_PARAMS = [
    ("/admin/v1/accounts/{a}/balance", "as_of"),
    ("/admin/v1/accounts/{a}/transactions", "from"),
    ("/admin/v1/accounts/{a}/transactions", "to"),
    ("/admin/v1/audit-log", "from"),
    ("/admin/v1/audit-log", "to"),
    ("/admin/v1/accounts/{a}/statement", "from"),
    ("/admin/v1/reports/revenue", "to"),
]


def test_a_bare_number_is_never_a_timestamp(client: TestClient[Any], make_account: Any) -> None:
    """`as_of=0.5` was read as half a second after the epoch; every timestamp input refuses it."""
    account = make_account("1")
    for path, param in TIMESTAMP_PARAMS:
        for number in NUMBERS:
            r = client.get(path.format(a=account), params={param: number}, headers=auth(VIEWER))
            assert r.status_code == 422, (path, param, number, r.text)
            assert r.json()["error"]["code"] == "validation_error"
            assert r.json()["error"]["param"] == param, (path, param, number, r.text)
    bodies = [  # the body fields were already strict; kept here so every timestamp input is covered
        (
            f"/admin/v1/accounts/{account}/grants",
            {"idempotency_key": new_id("g"), "amount": "1", "expires_at": 1900000000, "reason": "t"},
            "expires_at",
        ),
        (
            "/admin/v1/price-versions",
            {
                "currency": "USD",
                "effective_at": 1700000000,
                "models": [
                    {
                        "model": "m",
                        "max_input_tokens": 1,
                        "max_output_tokens": 1,
                        "rates": {"input": "1", "output": "1"},
                    }
                ],
            },
            "effective_at",
        ),
    ]
    for path, body, param in bodies:
        r = client.post(path, json=body, headers=auth(FINANCE))
        assert (r.status_code, r.json()["error"]["param"]) == (422, param), r.text


READ = [
    ("2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z"),
    ("2026-01-02T03:04:05.25+02:00", "2026-01-02T01:04:05.250000Z"),
    ("2026-01-02T03:04", "2026-01-02T03:04:00Z"),  # no offset: UTC
    ("2026-01-02", "2026-01-02T00:00:00Z"),  # a date alone: its midnight UTC
    ("2026-01-02t03:04:05z", "2026-01-02T03:04:05Z"),  # RFC 3339 allows lower case t and z
]
REFUSED = ["2026-02-30", "0000-01-01", "2026-01-02T03:04:05.1234567Z", "2026-01-02 03:04", "2026-01-02T03"]


def test_timestamps_are_rfc3339_text(client: TestClient[Any], make_account: Any) -> None:
    """What the API documents for every timestamp parameter (docs/api.md), read by one parser."""
    url = f"/admin/v1/accounts/{make_account('1')}/balance"
    for text, expected in READ:
        r = client.get(url, params={"as_of": text}, headers=auth(VIEWER))
        assert (r.status_code, r.json().get("as_of")) == (200, expected), (text, r.text)
    for text in REFUSED:
        r = client.get(url, params={"as_of": text}, headers=auth(VIEWER))
        assert r.status_code == 422, (text, r.text)
        assert r.json()["error"]["param"] == "as_of", (text, r.text)
