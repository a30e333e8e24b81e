"""Where webhooks may go, at delivery: vetted again, connected to the vetted address only,
https checked against the URL's host name, and what a viewer may learn from an attempt.

Real sockets on loopback: the allowed receiver listens on 127.0.0.2 (the tests'
LEDGER_WEBHOOK_ALLOWED_NETWORKS), a forbidden "internal service" on 127.0.0.1 on the same
port. Host names are the tests' own (`names`, the resolver seam), so a name can resolve
to one address when the alert is set and to another at delivery.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import ADMIN, FINANCE, VIEWER, auth
from tests.workers.alerts import (
    Receiver,
    cycle,
    deliver,
    deliveries,
    delivery_settings,
    due_now,
    events,
    free_port,
    names,
    receiving,
    resolving,
    set_alert,
)


@pytest.fixture
def pair() -> Iterator[tuple[Receiver, Receiver]]:
    """The allowed receiver on 127.0.0.2:P and an internal service on 127.0.0.1:P (same port)."""
    with receiving() as allowed, receiving(host="127.0.0.1", port=allowed.bound_port) as internal:
        yield allowed, internal


def test_a_name_that_resolves_inside_at_delivery_is_not_called(
    app: Any,
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    pair: tuple[Receiver, Receiver],
) -> None:
    allowed, internal = pair
    url = f"http://rebind.example.test:{allowed.bound_port}/hooks/ledger"
    account_id = make_account("0.01", currency=currency)
    with resolving(app, names({"rebind.example.test": ["127.0.0.2"]})):
        set_alert(client, account_id, "0.005", url)  # allowed when set
    cycle(client, account_id, max_output=250, completion=500)
    [event] = events(database, account_id)

    # At delivery the name points at loopback: refused, nothing sent anywhere.
    later = delivery_settings(settings, alert_retry_base_seconds=60)
    deliver(sa_url, later, resolve=names({"rebind.example.test": ["127.0.0.1"]}))
    assert internal.requests == [] and allowed.requests == []
    assert deliveries(database, event["id"]) == [(1, None, False)]
    r = client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(FINANCE))
    [attempt] = r.json()["data"][0]["deliveries"]
    assert attempt["error"] == "refused: rebind.example.test resolves to 127.0.0.1, a loopback address"

    # Back to the allowed address: delivered there, with the URL's host in Host.
    due_now(database, event["id"])
    deliver(sa_url, delivery_settings(settings), resolve=names({"rebind.example.test": ["127.0.0.2"]}))
    assert internal.requests == []
    [request] = allowed.requests
    assert request.headers["Host"] == f"rebind.example.test:{allowed.bound_port}"
    assert deliveries(database, event["id"]) == [(1, None, False), (2, 200, True)]


def test_delivery_connects_to_the_vetted_address_not_a_second_lookup(
    app: Any,
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    pair: tuple[Receiver, Receiver],
) -> None:
    """A rebinding DNS: the first answer is allowed, every later one is loopback. The POST
    goes to the first (vetted) address; the name is looked up once per attempt."""
    allowed, internal = pair
    url = f"http://pinned.example.test:{allowed.bound_port}/hooks/ledger"
    account_id = make_account("0.01", currency=currency)
    with resolving(app, names({"pinned.example.test": ["127.0.0.2"]})):
        set_alert(client, account_id, "0.005", url)
    cycle(client, account_id, max_output=250, completion=500)
    [event] = events(database, account_id)

    lookups: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.2"] if len(lookups) == 1 else ["127.0.0.1"]

    deliver(sa_url, delivery_settings(settings), resolve=rebinding)
    assert lookups == ["pinned.example.test"]
    assert internal.requests == []
    assert [r.headers["Ledger-Event-Id"] for r in allowed.requests] == [event["event_id"]]
    assert allowed.requests[0].headers["Host"] == f"pinned.example.test:{allowed.bound_port}"
    assert deliveries(database, event["id"]) == [(1, 200, True)]


def test_settings_changed_after_the_alert_was_set_apply_at_delivery(
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    pair: tuple[Receiver, Receiver],
) -> None:
    allowed, internal = pair
    account_id = make_account("0.01", currency=currency)
    set_alert(client, account_id, "0.005", allowed.url)  # 127.0.0.2: allow-listed when set
    cycle(client, account_id, max_output=250, completion=500)
    [event] = events(database, account_id)

    later = delivery_settings(settings, alert_retry_base_seconds=60)
    deliver(sa_url, replace(later, webhook_allowed_networks=()))
    due_now(database, event["id"])
    deliver(sa_url, replace(later, webhook_allow_http=False))
    due_now(database, event["id"])
    assert allowed.requests == [] and internal.requests == []
    assert deliveries(database, event["id"]) == [(1, None, False), (2, None, False)]
    errors = [
        d["error"]
        for d in client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(ADMIN)).json()[
            "data"
        ][0]["deliveries"]
    ]
    assert errors[0] == "refused: 127.0.0.2 resolves to 127.0.0.2, a loopback address"
    assert errors[1].startswith("refused: webhook_url must be https")

    deliver(sa_url, delivery_settings(settings))
    assert len(allowed.requests) == 1 and internal.requests == []


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for `hooks.test` (key, cert), made with the openssl CLI."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=hooks.test",
            "-addext", "subjectAltName=DNS:hooks.test", "-addext", "basicConstraints=critical,CA:TRUE",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return key, cert


def test_https_goes_to_the_vetted_address_with_the_host_name_for_sni_and_the_certificate(
    app: Any,
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
    certificate: tuple[Path, Path],
) -> None:
    key, cert = certificate
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    trust = ssl.create_default_context(cafile=str(cert))
    test_names = names({"hooks.test": ["127.0.0.2"], "other.test": ["127.0.0.2"]})
    with receiving(tls=server) as receiver:
        port = receiver.bound_port
        right, wrong = make_account("0.01", currency=currency), make_account("0.01", currency=currency)
        with resolving(app, test_names):
            set_alert(client, right, "0.005", f"https://hooks.test:{port}/hooks/ledger")
            set_alert(client, wrong, "0.005", f"https://other.test:{port}/hooks/ledger")
        for account_id in (right, wrong):
            cycle(client, account_id, max_output=250, completion=500)
        [sent], [refused] = events(database, right), events(database, wrong)

        deliver(sa_url, delivery_settings(settings, alert_max_attempts=1), resolve=test_names, tls=trust)
        assert deliveries(database, sent["id"]) == [(1, 200, True)]
        [request] = receiver.requests
        assert request.headers["Ledger-Event-Id"] == sent["event_id"]
        assert request.headers["Host"] == f"hooks.test:{port}"
        assert "hooks.test" in receiver.server_names  # SNI: the URL's name, not the address
        # The certificate names hooks.test: for other.test (same address) it does not verify.
        assert deliveries(database, refused["id"]) == [(1, None, False)]
        r = client.get(f"/admin/v1/accounts/{wrong}/alert/events", headers=auth(FINANCE))
        assert "CERTIFICATE_VERIFY_FAILED" in r.json()["data"][0]["deliveries"][0]["error"]


def test_a_viewer_sees_whether_an_attempt_was_delivered_but_not_why(
    app: Any,
    client: TestClient[Any],
    make_account: Any,
    currency: str,
    database: str,
    sa_url: str,
    settings: Any,
) -> None:
    """Connection refused, a timeout, HTTP 500 and a refused destination look the same to a
    viewer (no port-scan oracle); finance and admin see the detail."""
    with receiving(statuses=[500]) as failing, receiving(delay=2.5) as slow:
        urls = {
            "connection refused": f"http://127.0.0.2:{free_port('127.0.0.2')}/hook",
            "timeout": slow.url,
            "http 500": failing.url,
            "refused destination": "http://nothing.example.test:9/hook",
        }
        accounts = {}
        with resolving(app, names({"nothing.example.test": ["127.0.0.2"]})):
            for why, url in urls.items():
                accounts[why] = make_account("0.01", currency=currency)
                set_alert(client, accounts[why], "0.005", url)
                cycle(client, accounts[why], max_output=250, completion=500)
        one_try = delivery_settings(settings, alert_max_attempts=1, alert_timeout_seconds=1)
        deliver(sa_url, one_try, resolve=names({"nothing.example.test": ["127.0.0.1"]}))

        def attempts(account_id: str, token: str) -> list[dict[str, Any]]:
            r = client.get(f"/admin/v1/accounts/{account_id}/alert/events", headers=auth(token))
            assert r.status_code == 200, r.text
            [event] = r.json()["data"]
            assert (event["status"], event["attempts"]) == ("failed", 1)
            return [
                {k: v for k, v in d.items() if k not in ("at", "webhook_url")} for d in event["deliveries"]
            ]

        seen = {why: attempts(account_id, VIEWER) for why, account_id in accounts.items()}
        assert all(
            view == [{"attempt": 1, "status_code": None, "error": None, "delivered": False}]
            for view in seen.values()
        ), seen
        detail = {why: attempts(account_id, FINANCE)[0] for why, account_id in accounts.items()}
        assert detail["connection refused"]["error"].startswith("ConnectionRefusedError")
        assert "timed out" in detail["timeout"]["error"]
        assert (detail["http 500"]["status_code"], detail["http 500"]["error"]) == (500, "HTTP 500")
        assert detail["refused destination"]["error"] == (
            "refused: nothing.example.test resolves to 127.0.0.1, a loopback address"
        )
        assert attempts(accounts["http 500"], ADMIN)[0]["status_code"] == 500
