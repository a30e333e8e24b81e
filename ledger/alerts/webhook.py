"""The webhook: validating its URL, signing the body, one bounded HTTP POST.

- URL: absolute `http` or `https`, a host, no user:password part (it would be stored
  and shown back), no whitespace or control characters, at most 2048 characters. It is
  only parsed at configuration time, never fetched; the delivery worker calls it.
- Signature (Stripe-style): header `Ledger-Signature: t=<unix seconds>,v1=<hex>` where
  hex = HMAC-SHA256(LEDGER_WEBHOOK_SECRET, "<t>.<raw body>"). A receiver recomputes it
  over the exact bytes it received and rejects an old `t` (replay).
- POST: `http.client` with a timeout covering connect and each read; redirects are not
  followed (a 3xx is a failed attempt), proxies from the environment are not used. Any
  2xx is delivered. The response body is not read beyond what closing needs.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from ledger.errors import ValidationFailed

MAX_URL_LENGTH = 2048
SIGNATURE_HEADER = "Ledger-Signature"
USER_AGENT = "ledger-alerts/1"


def check_webhook_url(url: str) -> str:
    """The URL as given, if it is one the worker may call; else 422 naming `webhook_url`."""
    if len(url) > MAX_URL_LENGTH:
        raise ValidationFailed(f"webhook_url is longer than {MAX_URL_LENGTH} characters", param="webhook_url")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url) or not url.isascii():
        raise ValidationFailed(
            "webhook_url must be ASCII without spaces or control characters", param="webhook_url"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ValidationFailed(f"webhook_url is not a valid URL: {error}", param="webhook_url") from error
    if parts.scheme not in ("http", "https"):
        raise ValidationFailed("webhook_url must be an http:// or https:// URL", param="webhook_url")
    if not parts.hostname:
        raise ValidationFailed("webhook_url must name a host", param="webhook_url")
    if parts.username is not None or parts.password is not None:
        raise ValidationFailed("webhook_url must not carry a user or password", param="webhook_url")
    if port == 0:
        raise ValidationFailed("webhook_url has port 0", param="webhook_url")
    return url


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The `Ledger-Signature` header value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, body: bytes, header: str, *, tolerance: int = 300, now: float | None = None) -> bool:
    """What a receiver does (the README shows the same): recompute and compare in constant time."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = signature(secret, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))


@dataclass(frozen=True)
class Outcome:
    """One attempt: `status_code` if the server answered, `error` if it did not or was not 2xx."""

    delivered: bool
    status_code: int | None
    error: str | None


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float) -> Outcome:
    """POST `body` to `url` once (blocking; the caller runs it off the event loop)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(host, parts.port, timeout=timeout)
    else:
        connection = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    try:
        connection.request(
            "POST",
            path,
            body=body,
            headers={**headers, "Content-Type": "application/json", "User-Agent": USER_AGENT},
        )
        response = connection.getresponse()
        response.read(65_536)
        status = response.status
    except (OSError, http.client.HTTPException) as error:
        return Outcome(False, None, f"{type(error).__name__}: {error}"[:500])
    finally:
        connection.close()
    if 200 <= status < 300:
        return Outcome(True, status, None)
    return Outcome(False, status, f"HTTP {status}")
