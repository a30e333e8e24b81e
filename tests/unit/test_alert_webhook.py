"""The webhook's pure parts: signature, the docs' verification snippet (docs/alerts.md), URL rules, the
destination policy (with a stand-in resolver), its settings, backoff."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.alerts.delivery import MAX_BACKOFF_SECONDS, backoff_seconds
from ledger.alerts.destination import DestinationPolicy, DestinationRefused
from ledger.alerts.webhook import check_webhook_url, signature, verify
from ledger.errors import ValidationFailed
from ledger.settings import SettingsError, load_settings

SECRET = "s" * 40
BODY = b'{"id":"e1","type":"balance.below_threshold"}'
ALERTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def test_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    header = signature(SECRET, BODY, 1_700_000_000)
    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert verify(SECRET, BODY, header, now=1_700_000_010)
    assert not verify(SECRET, BODY + b" ", header, now=1_700_000_010)  # body changed
    assert not verify("x" * 40, BODY, header, now=1_700_000_010)  # another secret
    assert not verify(SECRET, BODY, header, now=1_700_001_000)  # stale: a replay
    assert not verify(SECRET, BODY, "v1=" + expected, now=1_700_000_010)


def test_the_documented_snippet_verifies_a_real_signature() -> None:
    block = re.search(r"```python\n(.*?def verify\(.*?)```", ALERTS_DOC.read_text(), re.S)
    assert block is not None
    code = "\n".join(line.removeprefix("  ") for line in block.group(1).splitlines())
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # the docs' own snippet, run as a receiver would
    header = signature(SECRET, BODY, int(time.time()))
    assert namespace["verify"](SECRET, BODY, header) is True
    assert namespace["verify"](SECRET, BODY + b"x", header) is False
    assert namespace["verify"](SECRET, BODY, signature(SECRET, BODY, int(time.time()) - 3600)) is False


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/hook", "https://hooks.example.com/a/b?c=d", "https://[::1]:443/x"]
)
def test_accepted_urls(url: str) -> None:
    assert check_webhook_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x/y",
        "mailto:a@b",
        "http:///path",
        "https://u:p@h/x",
        "https://u@h/x",
        "https://h/x\n",
        "https://h:0/",
        "https://h:70000/",
        "https://[::1/",
        "HTTPS//h",
    ],
)
def test_refused_urls(url: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        check_webhook_url(url)
    assert refused.value.param == "webhook_url"


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff_seconds(n, 10) for n in range(1, 6)] == [10, 20, 40, 80, 160]
    assert backoff_seconds(40, 10) == MAX_BACKOFF_SECONDS
    assert backoff_seconds(3, 0) == 0


def public(host: str, port: int) -> list[str]:
    return ["93.184.215.14"]


def test_https_only_unless_http_is_allowed() -> None:
    strict = DestinationPolicy()
    target = strict.vet("https://hooks.example.test/a/b?c=d", public)
    assert (target.scheme, target.host, target.port, target.path) == (
        "https",
        "hooks.example.test",
        443,
        "/a/b?c=d",
    )
    assert target.addresses == (ipaddress.ip_address("93.184.215.14"),)
    with pytest.raises(DestinationRefused, match="https"):
        strict.vet("http://hooks.example.test/", public)
    assert DestinationPolicy(allow_http=True).vet("http://hooks.example.test:8080", public).port == 8080


def test_allowed_networks_open_what_they_name_and_never_multicast_or_unspecified() -> None:
    everything = DestinationPolicy(allowed_networks=(ipaddress.ip_network("0.0.0.0/0"),))
    assert everything.refusal(ipaddress.ip_address("10.1.2.3")) is None
    assert everything.refusal(ipaddress.ip_address("::ffff:10.1.2.3")) is None  # judged as IPv4
    assert everything.refusal(ipaddress.ip_address("224.0.0.1")) == "multicast"
    assert everything.refusal(ipaddress.ip_address("0.0.0.0")) == "unspecified"
    assert everything.refusal(ipaddress.ip_address("::1")) == "loopback"  # an IPv4 network holds no IPv6
    narrow = DestinationPolicy(allowed_networks=(ipaddress.ip_network("10.8.0.0/16"),))
    assert narrow.refusal(ipaddress.ip_address("10.8.200.1")) is None
    assert narrow.refusal(ipaddress.ip_address("10.9.0.1")) == "private"
    assert narrow.refusal(ipaddress.ip_address("100.64.0.1")) == "non-global (shared or special-purpose)"
    assert narrow.refusal(ipaddress.ip_address("2606:4700::1111")) is None  # public IPv6


def test_every_resolved_address_must_pass() -> None:
    def mixed(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "fd00::7"]

    with pytest.raises(DestinationRefused) as refused:
        DestinationPolicy().vet("https://mixed.example.test/", mixed)
    assert refused.value.detail == "mixed.example.test resolves to fd00::7, a private address"
    assert "fd00" not in refused.value.message  # the API answer does not echo the address


def test_webhook_settings() -> None:
    base = {"LEDGER_DATABASE_URL": "postgresql://u@h/db", "LEDGER_GATEWAY_TOKENS": "x"}
    settings = load_settings(base)
    assert (settings.webhook_allow_http, settings.webhook_allowed_networks) == (False, ())
    settings = load_settings(
        {
            **base,
            "LEDGER_WEBHOOK_ALLOW_HTTP": "1",
            "LEDGER_WEBHOOK_ALLOWED_NETWORKS": "10.8.0.0/16, 127.0.0.2,fd00::/8",
        }
    )
    assert settings.webhook_allow_http is True
    assert [str(n) for n in settings.webhook_allowed_networks] == ["10.8.0.0/16", "127.0.0.2/32", "fd00::/8"]
    for bad in ("10.0.0.1/8", "intranet", "10.0.0.0/33"):
        with pytest.raises(SettingsError, match="LEDGER_WEBHOOK_ALLOWED_NETWORKS"):
            load_settings({**base, "LEDGER_WEBHOOK_ALLOWED_NETWORKS": bad})
