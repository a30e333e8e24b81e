"""Failed authentications, throttled per client address.

Every 401 (an unknown or malformed bearer token on `/v1` or `/admin/v1`, a refused
console login) counts one failure against the client's address. Once an address has
`LEDGER_AUTH_FAILURE_LIMIT` failures within a window of
`LEDGER_AUTH_FAILURE_WINDOW_SECONDS` (the window starts at its first failure), every
authentication attempt from it, even with a correct token, is answered 429
`rate_limited` with `Retry-After` until that window has passed. Successful requests
cost nothing and count nothing: while no address is blocked, a request only pays one
truth test of an empty dict (the fast lane included).

The state is in-process memory, per serving process: with N web workers (or
replicas), an address can make up to N times the limit failures per window before every
process refuses it. At most `LEDGER_AUTH_THROTTLE_ADDRESSES` addresses are tracked;
beyond that the oldest windows are forgotten first, so an attacker rotating addresses
cannot grow memory.

The client address is the socket peer. When the peer is one of
`LEDGER_TRUSTED_PROXIES`, it is the right-most `X-Forwarded-For` entry that is not a
trusted proxy (the address the outermost trusted proxy saw).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from litestar import Request, Response

from ledger.errors import TooManyRequests
from ledger.http.errors import error_response
from ledger.metrics import AUTH_FAILURES, AUTH_THROTTLED
from ledger.settings import Network, Settings


class AuthThrottle:
    """Failure windows per address (bounded), and the addresses currently refused."""

    def __init__(
        self,
        *,
        limit: int,
        window: float,
        max_addresses: int,
        trusted: tuple[str | Network, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.max_addresses = max_addresses
        self.trusted: tuple[Network, ...] = tuple(ipaddress.ip_network(str(n), strict=False) for n in trusted)
        self.clock = clock
        self._windows: OrderedDict[str, list[float]] = OrderedDict()  # address -> [start, failures]
        self.blocked: dict[str, float] = {}  # address -> refused until (clock time)
        self._next_purge = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> AuthThrottle:
        return cls(
            limit=settings.auth_failure_limit,
            window=settings.auth_failure_window_seconds,
            max_addresses=settings.auth_throttle_addresses,
            trusted=settings.trusted_proxies,
        )

    def retry_after(self, address: str) -> int | None:
        """Seconds until `address` may try again, or None if it is not refused."""
        now = self.clock()
        if now >= self._next_purge:
            self._purge(now)
        until = self.blocked.get(address)
        if until is None:
            return None
        left = until - now
        if left <= 0:
            del self.blocked[address]
            self._windows.pop(address, None)
            return None
        return max(1, math.ceil(left))

    def _purge(self, now: float) -> None:
        """Forget refusals that have ended (at most once a second), so that `blocked` empties
        again once an attack stops and requests go back to paying one truth test."""
        self._next_purge = now + 1
        for address in [a for a, until in self.blocked.items() if until <= now]:
            del self.blocked[address]
            self._windows.pop(address, None)

    def fail(self, address: str) -> None:
        now = self.clock()
        entry = self._windows.get(address)
        if entry is None or now - entry[0] >= self.window:
            self._windows.pop(address, None)
            entry = [now, 0]
            self._windows[address] = entry  # newest window last: eviction takes the oldest
            while len(self._windows) > self.max_addresses:
                oldest, _ = self._windows.popitem(last=False)
                self.blocked.pop(oldest, None)
        entry[1] += 1
        if entry[1] >= self.limit:
            self.blocked[address] = entry[0] + self.window

    def client_address(self, scope: Any) -> str:
        """The key failures are counted under: the client's IPv4 address, or its IPv6 /64 (one
        subscriber's prefix, which it could otherwise rotate through)."""
        return _per_subscriber(self._client(scope))

    def _client(self, scope: Any) -> str:
        client = scope.get("client")
        peer: str = client[0] if client else "unknown"
        if not self.trusted or not self._is_trusted(peer):
            return peer
        hops: list[str] = [
            hop.strip()
            for name, value in scope.get("headers") or ()
            if name == b"x-forwarded-for"
            for hop in value.decode("latin-1").split(",")
            if hop.strip()
        ]
        for hop in reversed(hops):
            if not self._is_trusted(hop):
                return hop
        return hops[0] if hops else peer

    def _is_trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)


def _per_subscriber(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return address


def surface_of(path: str) -> str:
    if path.startswith("/v1/"):
        return "gateway"
    if path.startswith("/console"):
        return "console"
    return "admin"


def refuse_if_blocked(throttle: AuthThrottle, scope: Any) -> None:
    """429 when the client's address is refused; nothing (one dict test) while none is."""
    if not throttle.blocked:
        return
    wait = throttle.retry_after(throttle.client_address(scope))
    if wait is not None:
        AUTH_THROTTLED.labels(surface_of(scope["path"])).inc()
        raise TooManyRequests(
            f"too many failed authentications from this address; retry after {wait} s", retry_after=wait
        )


def record_failure(throttle: AuthThrottle, scope: Any) -> None:
    """One failed authentication (a 401) from the request's client address."""
    AUTH_FAILURES.labels(surface_of(scope["path"])).inc()
    throttle.fail(throttle.client_address(scope))


def throttled_response(request: Request[Any, Any, Any], exc: TooManyRequests) -> Response[Any]:
    """The contract's error shape, with `Retry-After` (registered for TooManyRequests on the app)."""
    response = error_response(exc)
    response.headers["Retry-After"] = str(exc.retry_after)
    return response
