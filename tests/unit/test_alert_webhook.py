"""The webhook's pure parts: signature, the README's verification snippet, URL rules, backoff."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.alerts.delivery import MAX_BACKOFF_SECONDS, backoff_seconds
from ledger.alerts.webhook import check_webhook_url, signature, verify
from ledger.errors import ValidationFailed

SECRET = "s" * 40
BODY = b'{"id":"e1","type":"balance.below_threshold"}'
README = Path(__file__).resolve().parents[2] / "README.md"


def test_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    header = signature(SECRET, BODY, 1_700_000_000)
    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert verify(SECRET, BODY, header, now=1_700_000_010)
    assert not verify(SECRET, BODY + b" ", header, now=1_700_000_010)  # body changed
    assert not verify("x" * 40, BODY, header, now=1_700_000_010)  # another secret
    assert not verify(SECRET, BODY, header, now=1_700_001_000)  # stale: a replay
    assert not verify(SECRET, BODY, "v1=" + expected, now=1_700_000_010)


def test_the_readme_snippet_verifies_a_real_signature() -> None:
    block = re.search(r"```python\n(.*?def verify\(.*?)```", README.read_text(), re.S)
    assert block is not None
    code = "\n".join(line.removeprefix("  ") for line in block.group(1).splitlines())
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # the README's own snippet, run as a receiver would
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
