"""The webhook: the form of its URL, signing the body, one bounded HTTP POST.

- URL: absolute `http` or `https`, a host, no user:password part (it would be stored
  and shown back), no whitespace or control characters, at most 2048 characters. This
  module checks its form; where it may point is `ledger.alerts.destination`'s policy,
  applied at configuration time (without fetching anything) and before every POST.
- Signature (Stripe-style): header `Ledger-Signature: t=<unix seconds>,v1=<hex>` where
  hex = HMAC-SHA256(LEDGER_WEBHOOK_SECRET, "<t>.<raw body>"). A receiver recomputes it
  over the exact bytes it received and rejects an old `t` (replay).
- POST: to a vetted `Target`: the TCP connection goes to one of the addresses the policy
  checked (never to a fresh resolution of the name), while the request carries the URL's
  host in `Host` and, for https, in SNI and the certificate check (verified against the
  system's trust store, or the `tls` context given). `http.client` with a timeout
  covering connect and each read; redirects are not followed (a 3xx is a failed
  attempt), proxies from the environment are not used. Any 2xx is delivered. The
  response body is not read beyond what closing needs.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ledger.alerts.destination import IPAddress, Target
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
    if parts.scheme not in ("http", "https") or not url.startswith(parts.scheme + "://"):
        # urlsplit lower-cases the scheme; the stored URL must be exactly what was vetted.
        raise ValidationFailed(
            "webhook_url must start with https:// or http:// (lower case)", param="webhook_url"
        )
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
    """What a receiver does (docs/alerts.md shows the same): recompute and compare in constant time."""
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


def connect(addresses: Sequence[IPAddress], port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of `addresses` that answers: IP addresses, never a name."""
    failure: OSError = OSError("no address to connect to")
    for address in addresses:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((str(address), port))
        except OSError as error:
            sock.close()
            failure = error
            continue
        return sock
    raise failure


class PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to `host` (its Host header) over a connection made to the vetted addresses only."""

    def __init__(self, target: Target, *, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self.addresses = target.addresses

    def connect(self) -> None:
        self.sock = connect(self.addresses, self.port, self.timeout)


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to `host` (Host, SNI, certificate name) over a connection to the vetted addresses."""

    def __init__(self, target: Target, *, timeout: float, tls: ssl.SSLContext) -> None:
        super().__init__(target.host, target.port, timeout=timeout, context=tls)
        self.addresses = target.addresses
        self.tls = tls

    def connect(self) -> None:
        sock = connect(self.addresses, self.port, self.timeout)
        try:
            self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


def post(
    target: Target, body: bytes, headers: dict[str, str], *, timeout: float, tls: ssl.SSLContext | None = None
) -> Outcome:
    """POST `body` to `target` once (blocking; the caller runs it off the event loop)."""
    connection: http.client.HTTPConnection
    if target.scheme == "https":
        connection = PinnedHTTPSConnection(target, timeout=timeout, tls=tls or ssl.create_default_context())
    else:
        connection = PinnedHTTPConnection(target, timeout=timeout)
    try:
        connection.request(
            "POST",
            target.path,
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
