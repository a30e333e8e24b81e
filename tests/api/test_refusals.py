"""Clean refusals of malformed requests: never a 500, never a change.

One case list covers every endpoint that takes a body; each refusal is checked for
its status, code and `param`, and for leaving the ledger exactly as it was (row
counts of every table that records money, prices or actions, and every balance).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import (
    ADMIN,
    FINANCE,
    GATEWAY,
    VIEWER,
    auth,
    fresh_currency,
    new_id,
    open_account,
    publish,
    simple_document,
)

JSON = {"Content-Type": "application/json"}
Snapshot = Callable[[], tuple[Any, ...]]


@pytest.fixture
def snapshot(database: str) -> Snapshot:
    """Everything a refused request could have changed, read fresh (committed rows only)."""

    def take() -> tuple[Any, ...]:
        with psycopg.connect(database, autocommit=True) as conn:
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM journal_transactions), "
                "(SELECT count(*) FROM journal_entries), (SELECT count(*) FROM holds), "
                "(SELECT count(*) FROM audit_log), (SELECT count(*) FROM price_versions), "
                "(SELECT count(*) FROM idempotency_keys)"
            ).fetchone()
            balances = conn.execute(
                "SELECT id, balance, held, credit_limit FROM accounts ORDER BY id"
            ).fetchall()
            holds = conn.execute("SELECT id, state, usage FROM holds ORDER BY id").fetchall()
        return (counts, balances, holds)

    return take


@pytest.fixture(scope="module")
def world(client: TestClient[Any]) -> dict[str, str]:
    """An account with money in a currency of its own, and an open hold on it."""
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account = open_account(client, "5", currency=currency)
    r = client.post(
        "/v1/holds",
        json={"account_id": account, "idempotency_key": new_id("r"), "model": "t-simple"},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201, r.text
    return {"account": account, "hold": r.json()["id"], "currency": currency}


USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}

# (name, path template, token, a valid body, the path (keys) of a string to poison, its `param`)
BODY_CASES: list[tuple[str, str, str, dict[str, Any], list[Any], str]] = [
    ("create account id", "/admin/v1/accounts", FINANCE, {"account_id": "x"}, ["account_id"], "account_id"),
    (
        "create account metadata",
        "/admin/v1/accounts",
        FINANCE,
        {"account_id": "x", "metadata": {"team": {"names": ["a", "b"]}}},
        ["metadata", "team", "names", 1],
        "metadata.team.names[1]",
    ),
    (
        "deposit key",
        "/admin/v1/accounts/{account}/deposits",
        FINANCE,
        {"idempotency_key": "k", "amount": "1"},
        ["idempotency_key"],
        "idempotency_key",
    ),
    (
        "deposit reference",
        "/admin/v1/accounts/{account}/deposits",
        FINANCE,
        {"idempotency_key": "k", "amount": "1", "reference": "wire"},
        ["reference"],
        "reference",
    ),
    (
        "adjustment reason",
        "/admin/v1/accounts/{account}/adjustments",
        FINANCE,
        {"idempotency_key": "k", "amount": "1", "reason": "why"},
        ["reason"],
        "reason",
    ),
    (
        "reserve key",
        "/v1/holds",
        GATEWAY,
        {"account_id": "{account}", "idempotency_key": "k", "model": "t-simple"},
        ["idempotency_key"],
        "idempotency_key",
    ),
    (
        "reserve metadata",
        "/v1/holds",
        GATEWAY,
        {"account_id": "{account}", "idempotency_key": "k", "model": "t-simple", "metadata": {"r": "x"}},
        ["metadata", "r"],
        "metadata.r",
    ),
    (
        "checkpoint usage",
        "/v1/holds/{hold}/usage",
        GATEWAY,
        {"usage": dict(USAGE, note="x")},
        ["usage", "note"],
        "usage.note",
    ),
    (
        "settle nested usage",
        "/v1/holds/{hold}/settle",
        GATEWAY,
        {"usage": dict(USAGE, completion_tokens_details={"kind": "x"})},
        ["usage", "completion_tokens_details", "kind"],
        "usage.completion_tokens_details.kind",
    ),
    (
        "interrupt usage",
        "/v1/holds/{hold}/interrupt",
        GATEWAY,
        {"usage": dict(USAGE, n="x")},
        ["usage", "n"],
        "usage.n",
    ),
    (
        "admin settle reason",
        "/admin/v1/holds/{hold}/settle",
        FINANCE,
        {"reason": "r", "usage": USAGE},
        ["reason"],
        "reason",
    ),
    (
        "admin release reason",
        "/admin/v1/holds/{hold}/release",
        FINANCE,
        {"reason": "r"},
        ["reason"],
        "reason",
    ),
    ("gateway quote model", "/v1/quotes", GATEWAY, {"model": "t-simple", "usage": USAGE}, ["model"], "model"),
    (
        "admin quote usage",
        "/admin/v1/quotes",
        VIEWER,
        {"model": "t", "usage": dict(USAGE, x="y")},
        ["usage", "x"],
        "usage.x",
    ),
    (
        "price document model",
        "/admin/v1/price-versions",
        FINANCE,
        simple_document("XNU"),
        ["models", 0, "model"],
        "models[0].model",
    ),
]


def fill(template: Any, world: dict[str, str]) -> Any:
    if isinstance(template, str):
        return template.format(**world) if "{" in template else template
    if isinstance(template, dict):
        return {k: fill(v, world) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, world) for v in template]
    return template


def poisoned(body: dict[str, Any], keys: list[Any]) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    node: Any = body
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = "a\u0000b"
    return body


@pytest.mark.parametrize(
    ("name", "path", "token", "body", "keys", "param"), BODY_CASES, ids=[c[0] for c in BODY_CASES]
)
def test_nul_in_any_body_string_is_422_naming_the_field(
    client: TestClient[Any],
    world: dict[str, str],
    snapshot: Snapshot,
    name: str,
    path: str,
    token: str,
    body: dict[str, Any],
    keys: list[Any],
    param: str,
) -> None:
    before = snapshot()
    r = client.post(path.format(**world), json=poisoned(fill(body, world), keys), headers=auth(token))
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {
        "type": "invalid_request",
        "code": "validation_error",
        "message": r.json()["error"]["message"],
        "param": param,
    }
    assert "NUL" in r.json()["error"]["message"]
    assert snapshot() == before


def test_nul_in_a_key_path_parameter_and_query_parameter(
    client: TestClient[Any], world: dict[str, str], snapshot: Snapshot
) -> None:
    before = snapshot()
    r = client.post(
        "/admin/v1/accounts", json={"account_id": "x", "metadata": {"a\u0000": 1}}, headers=auth(FINANCE)
    )
    assert (r.status_code, r.json()["error"]["param"]) == (422, "metadata.a\u0000")
    for path in (
        "/admin/v1/accounts/a%00b",
        "/admin/v1/accounts/a%00b/balance",
        "/admin/v1/accounts/a%00b/transactions",
    ):
        r = client.get(path, headers=auth(VIEWER))
        assert (r.status_code, r.json()["error"]["param"]) == (422, "account_id"), (path, r.text)
    r = client.post(
        "/admin/v1/accounts/a%00b/deposits",
        json={"idempotency_key": "k", "amount": "1"},
        headers=auth(FINANCE),
    )
    assert (r.status_code, r.json()["error"]["param"]) == (422, "account_id")
    for path, key in [
        ("/v1/holds/a%00b", "hold_id"),
        ("/admin/v1/price-versions/v%001", "version"),
        ("/admin/v1/reconciliation/runs/%00", "run_id"),
    ]:
        token = GATEWAY if path.startswith("/v1") else VIEWER
        r = client.get(path, headers=auth(token))
        assert (r.status_code, r.json()["error"]["param"]) == (422, key), (path, r.text)
    for path, key in [
        ("/admin/v1/audit-log?target=a%00b", "target"),
        ("/admin/v1/audit-log?cursor=%00", "cursor"),
        ("/admin/v1/accounts?cursor=a%00", "cursor"),
        ("/admin/v1/holds?account_id=a%00", "account_id"),
        (f"/admin/v1/accounts/{world['account']}/transactions?cursor=1%00", "cursor"),
    ]:
        r = client.get(path, headers=auth(VIEWER))
        assert (r.status_code, r.json()["error"]["param"]) == (422, key), (path, r.text)
    assert snapshot() == before


def nested(depth: int) -> bytes:
    return b'{"account_id": "deep", "metadata": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"


@pytest.mark.parametrize(
    ("path", "token"),
    [
        ("/admin/v1/accounts", FINANCE),
        ("/admin/v1/price-versions", FINANCE),
        ("/v1/holds", GATEWAY),
        ("/v1/quotes", GATEWAY),
        ("/v1/holds/{hold}/settle", GATEWAY),
    ],
)
def test_deep_nesting_is_400_invalid_json(
    client: TestClient[Any], world: dict[str, str], snapshot: Snapshot, path: str, token: str
) -> None:
    before = snapshot()
    for raw in (b"[" * 50_000 + b"]" * 50_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000, nested(40)):
        r = client.post(path.format(**world), content=raw, headers={**auth(token), **JSON})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_json"
        assert "nested" in r.json()["error"]["message"]
    assert snapshot() == before


def test_reasonable_nesting_in_metadata_is_accepted(client: TestClient[Any]) -> None:
    account = new_id()
    raw = nested(20).replace(b'"deep"', json.dumps(account).encode())
    r = client.post("/admin/v1/accounts", content=raw, headers={**auth(FINANCE), **JSON})
    assert r.status_code == 201, r.text


DUPLICATES: list[tuple[str, str, bytes, str]] = [
    (
        "/admin/v1/accounts/{account}/deposits",
        FINANCE,
        b'{"idempotency_key": "dup-1", "amount": "1", "amount": "1000000"}',
        "amount",
    ),
    ("/admin/v1/accounts", FINANCE, b'{"account_id": "dup-a", "metadata": {"t": 1, "t": 2}}', "t"),
    (
        "/v1/holds/{hold}/settle",
        GATEWAY,
        b'{"usage": {"prompt_tokens": 1, "completion_tokens": 1, "completion_tokens": 900}}',
        "completion_tokens",
    ),
    (
        "/v1/holds/{hold}/usage",
        GATEWAY,
        b'{"usage": {"prompt_tokens": 1, "completion_tokens": 1,'
        b' "prompt_tokens_details": {"cached_tokens": 0, "cached_tokens": 1}}}',
        "cached_tokens",
    ),
    (
        "/admin/v1/price-versions",
        FINANCE,
        b'{"currency": "XDU", "models": [{"model": "m", "max_input_tokens": 1, "max_output_tokens": 1,'
        b' "rates": {"input": "1", "output": "1", "output": "0"}}]}',
        "output",
    ),
    ("/v1/quotes", GATEWAY, b'{"model": "a", "model": "b"}', "model"),
]


@pytest.mark.parametrize(("path", "token", "raw", "key"), DUPLICATES)
def test_duplicate_keys_at_any_level_are_400(
    client: TestClient[Any],
    world: dict[str, str],
    snapshot: Snapshot,
    path: str,
    token: str,
    raw: bytes,
    key: str,
) -> None:
    before = snapshot()
    r = client.post(path.format(**world), content=raw, headers={**auth(token), **JSON})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"
    assert r.json()["error"]["param"] == key
    assert snapshot() == before


def test_nan_and_infinity_are_not_json(client: TestClient[Any], world: dict[str, str]) -> None:
    for raw in (b'{"model": "t-simple", "n": NaN}', b'{"model": "t-simple", "n": Infinity}'):
        r = client.post("/v1/quotes", content=raw, headers={**auth(GATEWAY), **JSON})
        assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_json")


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/x-www-form-urlencoded",
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/jsonx",
    ],
)
def test_a_body_that_is_not_declared_json_is_415(
    client: TestClient[Any], world: dict[str, str], snapshot: Snapshot, content_type: str | None
) -> None:
    before = snapshot()
    headers = auth(FINANCE)
    if content_type is not None:
        headers["Content-Type"] = content_type
    raw = json.dumps({"idempotency_key": new_id("ct"), "amount": "1"}).encode()
    r = client.post(f"/admin/v1/accounts/{world['account']}/deposits", content=raw, headers=headers)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["code"] == "unsupported_media_type"
    r = client.post(
        "/admin/v1/price-versions", content=json.dumps(simple_document("XCT")).encode(), headers=headers
    )
    assert r.status_code == 415, r.text
    assert snapshot() == before


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "application/merge-patch+json",
    ],
)
def test_json_media_types_are_accepted(
    client: TestClient[Any], world: dict[str, str], content_type: str
) -> None:
    raw = json.dumps({"idempotency_key": new_id("ct"), "amount": "0.5"}).encode()
    r = client.post(
        f"/admin/v1/accounts/{world['account']}/deposits",
        content=raw,
        headers={**auth(FINANCE), "Content-Type": content_type},
    )
    assert r.status_code == 201, r.text


def test_body_less_posts_need_no_content_type(client: TestClient[Any], world: dict[str, str]) -> None:
    r = client.post(
        "/v1/holds",
        json={"account_id": world["account"], "idempotency_key": new_id("r"), "model": "t-simple"},
        headers=auth(GATEWAY),
    )
    hold = r.json()["id"]
    r = client.post(f"/v1/holds/{hold}/release", headers=auth(GATEWAY))
    assert (r.status_code, r.json()["state"]) == (200, "released"), r.text
    r = client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE))
    assert r.status_code == 201, r.text


def test_oversized_body_is_413_payload_too_large(
    client: TestClient[Any], settings: Any, world: dict[str, str], snapshot: Snapshot
) -> None:
    before = snapshot()
    limit = settings.max_body_bytes
    padding = " " * limit
    raw = ('{"idempotency_key": "big", "amount": "1"' + padding + "}").encode()
    r = client.post(
        f"/admin/v1/accounts/{world['account']}/deposits", content=raw, headers={**auth(FINANCE), **JSON}
    )
    assert r.status_code == 413
    assert r.json() == {
        "error": {
            "type": "invalid_request",
            "code": "payload_too_large",
            "message": f"request body is larger than the limit of {limit} bytes",
            "param": None,
        }
    }
    assert snapshot() == before
    # just under the limit is read (and here is an ordinary deposit)
    raw = ('{"idempotency_key": "' + new_id("big") + '", "amount": "1"}').encode()
    raw = raw[:-1] + b" " * (limit - len(raw)) + b"}"
    r = client.post(
        f"/admin/v1/accounts/{world['account']}/deposits", content=raw, headers={**auth(FINANCE), **JSON}
    )
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    "header",
    [
        f"Bearer {FINANCE} ",
        f"Bearer {FINANCE}\t",
        f"Bearer  {FINANCE}",
        f"Bearer {FINANCE}\n",
        f"Bearer\t{FINANCE}",
        f" Bearer {FINANCE}",
        f"Bearer {FINANCE[:-1]}",
        "Bearer ",
        "Bearer",
        FINANCE,
    ],
)
def test_tokens_are_compared_exactly(client: TestClient[Any], header: str) -> None:
    r = client.get("/admin/v1/accounts", headers={"Authorization": header})
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthorized"


def test_the_exact_token_and_a_lowercase_scheme_still_work(client: TestClient[Any]) -> None:
    assert client.get("/admin/v1/accounts", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 200
    assert client.get("/admin/v1/accounts", headers={"Authorization": f"bearer {ADMIN}"}).status_code == 200


def test_auth_comes_before_any_parsing(client: TestClient[Any]) -> None:
    r = client.post("/admin/v1/accounts?bogus=1", content=b"[" * 50_000, headers=JSON)
    assert r.status_code == 401
