"""The alert configuration surface: PUT / GET / DELETE /admin/v1/accounts/{id}/alert.

Roles (finance configures, viewer reads), URL and threshold validation (a refused
request changes nothing and fetches nothing), the audit trail, removal cancelling
undelivered events, and the OpenAPI entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import ADMIN, FINANCE, GATEWAY, VIEWER, auth, new_id
from tests.workers.alerts import names, resolving

URL = "https://hooks.example.test/ledger?source=alerts"
PUBLIC = "93.184.215.14"  # a global address; nothing here ever connects to it
TEST_NAMES = {
    "hooks.example.test": [PUBLIC],
    "internal.example.test": ["10.20.30.40"],
    "mixed.example.test": [PUBLIC, "169.254.169.254"],
    "mapped.example.test": ["::ffff:127.0.0.1"],
    "receiver.example.test": ["127.0.0.2"],
}


@pytest.fixture(autouse=True)
def test_names(app: Any) -> Iterator[None]:
    """The made-up names above resolve (other names, `localhost` included, as the system says)."""
    with resolving(app, names(TEST_NAMES)):
        yield


def put(client: TestClient[Any], account_id: str, token: str = FINANCE, **body: Any) -> Any:
    payload = {"threshold": "5", "webhook_url": URL, "reason": "tell ops before it runs dry", **body}
    return client.put(f"/admin/v1/accounts/{account_id}/alert", json=payload, headers=auth(token))


def audit_of(client: TestClient[Any], account_id: str) -> list[dict[str, Any]]:
    r = client.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    entries: list[dict[str, Any]] = r.json()["data"]
    return entries


def test_configure_read_replace_and_remove(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("10")
    r = put(client, account_id)
    assert r.status_code == 200, r.text
    alert = r.json()
    assert {
        k: alert[k] for k in ("account_id", "threshold", "webhook_url", "currency", "state", "available")
    } == {
        "account_id": account_id,
        "threshold": "5",
        "webhook_url": URL,
        "currency": "USD",
        "state": "above",
        "available": "10",
    }
    r = client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER))
    assert r.status_code == 200 and r.json()["threshold"] == "5", r.text

    # Replacing it with a threshold above available: `below` from the start, nothing sent.
    r = put(client, account_id, threshold="12.000000000001")
    assert r.status_code == 200 and r.json()["state"] == "below", r.text
    entries = [e for e in audit_of(client, account_id) if e["action"] == "alert.configure"]
    assert entries[0]["details"] == {
        "before": {"threshold": "5", "webhook_url": URL},
        "after": {"threshold": "12.000000000001", "webhook_url": URL},
    }
    assert entries[0]["reason"] == "tell ops before it runs dry"
    assert entries[1]["details"]["before"] is None

    r = client.delete(
        f"/admin/v1/accounts/{account_id}/alert", params={"reason": "no longer needed"}, headers=auth(FINANCE)
    )
    assert r.status_code == 204, r.text
    assert (
        client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER)).json()["error"]["code"]
        == "alert_not_found"
    )
    [removed] = [e for e in audit_of(client, account_id) if e["action"] == "alert.remove"]
    assert removed["reason"] == "no longer needed"
    assert removed["details"]["cancelled_events"] == 0
    r = client.delete(
        f"/admin/v1/accounts/{account_id}/alert", params={"reason": "again"}, headers=auth(FINANCE)
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "alert_not_found"
    assert (
        client.get("/admin/v1/audit-log", params={"action": "alert.remove"}, headers=auth(VIEWER)).status_code
        == 200
    )


def test_removal_cancels_undelivered_events(
    client: TestClient[Any], make_account: Any, database: str
) -> None:
    account_id = make_account("10")
    assert put(client, account_id, threshold="5", webhook_url="http://127.0.0.2:9/never").status_code == 200
    r = client.post(
        f"/admin/v1/accounts/{account_id}/adjustments",
        json={"idempotency_key": new_id("adj"), "amount": "-6", "reason": "test correction"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    r = client.delete(
        f"/admin/v1/accounts/{account_id}/alert", params={"reason": "stop"}, headers=auth(FINANCE)
    )
    assert r.status_code == 204, r.text
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT kind, status FROM alert_events WHERE account_id = %s", (account_id,)
        ).fetchall()
    assert rows == [("below", "cancelled")]
    events = client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(VIEWER)).json()["data"]
    assert [(e["type"], e["status"], e["available_before"], e["available_after"]) for e in events] == [
        ("balance.below_threshold", "cancelled", "10", "4")
    ]
    # Removed: further crossings record nothing.
    r = client.post(
        f"/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": new_id("dep"), "amount": "10"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201
    with psycopg.connect(database) as conn:
        assert conn.execute(
            "SELECT count(*) FROM alert_events WHERE account_id = %s", (account_id,)
        ).fetchone() == (1,)


def test_roles(client: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("1")
    assert put(client, account_id, token=VIEWER).status_code == 403
    assert put(client, account_id, token=GATEWAY).status_code == 403
    assert client.put(f"/admin/v1/accounts/{account_id}/alert", json={}).status_code == 401
    assert put(client, account_id, token=ADMIN).status_code == 200
    r = client.delete(f"/admin/v1/accounts/{account_id}/alert", params={"reason": "x"}, headers=auth(VIEWER))
    assert r.status_code == 403
    assert client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER)).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"webhook_url": "ftp://example.test/x"}, "webhook_url"),
        ({"webhook_url": "file:///etc/passwd"}, "webhook_url"),
        ({"webhook_url": "javascript:alert(1)"}, "webhook_url"),
        ({"webhook_url": "http://"}, "webhook_url"),
        ({"webhook_url": "//example.test/x"}, "webhook_url"),
        ({"webhook_url": "https://user:secret@example.test/x"}, "webhook_url"),
        ({"webhook_url": "https://example.test/a b"}, "webhook_url"),
        ({"webhook_url": "https://example.test:99999/x"}, "webhook_url"),
        ({"webhook_url": "https://exämple.test/x"}, "webhook_url"),
        ({"webhook_url": "https://example.test/" + "a" * 2100}, "webhook_url"),
        ({"webhook_url": ""}, "webhook_url"),
        ({"threshold": "1e3"}, "threshold"),
        ({"threshold": 5}, "threshold"),
        ({"threshold": "0.0000000000001"}, "threshold"),
        ({"threshold": "100000000000000000000000000"}, "threshold"),
        ({"threshold": "abc"}, "threshold"),
        ({"reason": "   "}, "reason"),
        ({"reason": ""}, "reason"),
        ({"extra": 1}, "extra"),
    ],
)
def test_refused_configuration_changes_nothing(
    client: TestClient[Any], make_account: Any, body: dict[str, Any], param: str
) -> None:
    account_id = make_account("1")
    r = put(client, account_id, **body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == param, r.text
    assert client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER)).status_code == 404
    assert [e for e in audit_of(client, account_id) if e["action"].startswith("alert.")] == []


def test_unknown_account(client: TestClient[Any]) -> None:
    missing = new_id()
    r = put(client, missing)
    assert r.status_code == 404 and r.json()["error"]["code"] == "account_not_found"
    assert client.get(f"/admin/v1/accounts/{missing}/alert", headers=auth(VIEWER)).status_code == 404
    assert client.get(f"/admin/v1/accounts/{missing}/alert/events", headers=auth(VIEWER)).status_code == 404
    r = client.delete(f"/admin/v1/accounts/{missing}/alert", params={"reason": "x"}, headers=auth(FINANCE))
    assert r.status_code == 404 and r.json()["error"]["code"] == "account_not_found"
    r = client.delete(f"/admin/v1/accounts/{missing}/alert", headers=auth(FINANCE))
    assert r.status_code == 422 and r.json()["error"]["param"] == "reason"


def test_openapi_documents_the_alert_routes(client: TestClient[Any]) -> None:
    doc = client.get("/schema/openapi.json").json()
    path = doc["paths"]["/admin/v1/accounts/{account_id}/alert"]
    assert set(path) >= {"put", "get", "delete"}
    for operation in (path["put"], path["get"], path["delete"]):
        assert operation["security"], operation
        assert {"401", "403", "404", "422"} <= set(operation["responses"])
    assert "415" in path["put"]["responses"]
    assert "/admin/v1/accounts/{account_id}/alert/events" in doc["paths"]


INTERNAL = [
    "http://127.0.0.1:8080/hook",  # loopback
    "http://localhost:8080/hook",  # a name for it (the system resolver: /etc/hosts)
    "http://2130706433/hook",  # 127.0.0.1 spelt as one decimal number
    "http://0177.0.0.1/hook",  # octal
    "http://0x7f.1/hook",  # hex, short form
    "http://127.1/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped IPv6
    "http://[::ffff:7f00:1]/hook",
    "http://0.0.0.0:8000/hook",  # unspecified
    "http://[::]/hook",
    "http://169.254.169.254/latest/meta-data/",  # link-local: cloud metadata
    "http://[fe80::1]/hook",
    "http://10.1.2.3/hook",  # private
    "http://172.16.0.1/hook",
    "http://192.168.1.1/hook",
    "http://[fc00::1]/hook",  # unique local
    "http://100.64.0.1/hook",  # CGNAT
    "http://198.18.0.1/hook",  # benchmarking
    "http://192.0.2.1/hook",  # documentation
    "http://224.0.0.1/hook",  # multicast
    "http://[ff02::1]/hook",
    "http://240.0.0.1/hook",  # reserved
    "http://255.255.255.255/hook",
    "http://[2002:7f00:1::]/hook",  # 6to4 carrying 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 carrying 169.254.169.254
    "http://127.0.0.3:9/hook",  # loopback beside the allow-listed 127.0.0.2
    "https://internal.example.test/hook",  # a name for a private address
    "https://mixed.example.test/hook",  # one public address and one link-local: every one counts
    "https://mapped.example.test/hook",
    "https://nowhere.example.test/hook",  # does not resolve
]


@pytest.mark.parametrize("url", INTERNAL)
def test_internal_destinations_are_refused_when_set(
    client: TestClient[Any], make_account: Any, url: str
) -> None:
    account_id = make_account("1")
    r = put(client, account_id, webhook_url=url)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "validation_error"
    assert r.json()["error"]["param"] == "webhook_url"
    assert client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER)).status_code == 404
    assert [e for e in audit_of(client, account_id) if e["action"].startswith("alert.")] == []


@pytest.mark.parametrize(
    "accepted",
    [
        URL,
        f"https://{PUBLIC}:8443/x",
        "http://127.0.0.2:9/allow-listed",  # inside LEDGER_WEBHOOK_ALLOWED_NETWORKS
        "http://receiver.example.test:9/allow-listed",
    ],
)
def test_public_and_allow_listed_destinations_are_accepted_and_a_refusal_keeps_them(
    client: TestClient[Any], make_account: Any, accepted: str
) -> None:
    account_id = make_account("1")
    r = put(client, account_id, webhook_url=accepted)
    assert r.status_code == 200, r.text
    assert r.json()["webhook_url"] == accepted
    r = put(client, account_id, webhook_url="http://localhost:5432/")
    assert (r.status_code, r.json()["error"]["param"]) == (422, "webhook_url"), r.text
    assert "loopback" in r.json()["error"]["message"]
    alert = client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER)).json()
    assert alert["webhook_url"] == accepted


def test_an_upper_case_scheme_is_422_not_500(client: TestClient[Any], make_account: Any) -> None:
    """Found in review: `HTTPS://...` passed the check (urlsplit lower-cases the scheme) and the
    database's own check then refused the stored URL: a 500."""
    account_id = make_account("10")
    r = put(client, account_id, webhook_url="HTTPS://127.0.0.2:9/hook")
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == "webhook_url"
    assert client.get(f"/admin/v1/accounts/{account_id}/alert", headers=auth(VIEWER)).status_code == 404
