"""Bearer-token auth for the two surfaces.

- `/v1/...` takes gateway tokens (`LEDGER_GATEWAY_TOKENS`);
- `/admin/v1/...` takes admin tokens (`LEDGER_ADMIN_TOKENS`, `token:role[:name]`), with
  roles ordered viewer < finance < admin; a handler states its minimum role in
  `opt={"role": ...}` (default viewer).

A missing or unknown token is 401 (the token is compared exactly as sent: no
whitespace is trimmed); a known token on the wrong surface, or a role
too low, is 403. A token is looked up by its SHA-256 digest (one dict probe: its timing
depends on the digest, never on the token's bytes); what logs and the audit log record
is its identity (`ledger.identity`: the operator's name for it, or a keyed fingerprint),
never the token nor an unkeyed hash of it. Every 401 is counted against the client's
address, and an address over the limit is answered 429 (`ledger.http.throttle`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import structlog
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from ledger.errors import Forbidden, Unauthorized
from ledger.http.throttle import AuthThrottle, record_failure, refuse_if_blocked
from ledger.identity import fingerprint, identity_key
from ledger.settings import ROLES, Role, Settings


@dataclass(frozen=True)
class Principal:
    surface: str  # "gateway" or "admin"
    role: str  # "gateway" for gateway tokens
    fingerprint: str  # keyed (ledger.identity): distinct per token, useless without the key
    name: str | None = None  # the operator's name for the token, if any

    @property
    def identity(self) -> str:
        """What the audit log records: role and name (else keyed fingerprint), never the token."""
        return f"{self.role}:{self.name or self.fingerprint}"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenRegistry:
    def __init__(self, settings: Settings) -> None:
        self.key = identity_key(settings)
        # digest -> principal; a token configured twice keeps its first entry (gateway first)
        self._by_digest: dict[bytes, Principal] = {}
        for gateway in settings.gateway_tokens:
            principal = Principal("gateway", "gateway", fingerprint(self.key, gateway.token), gateway.name)
            self._by_digest.setdefault(_digest(gateway.token), principal)
        for admin in settings.admin_tokens:
            principal = Principal("admin", admin.role, fingerprint(self.key, admin.token), admin.name)
            self._by_digest.setdefault(_digest(admin.token), principal)

    def admin_principals(self) -> list[Principal]:
        return [p for p in self._by_digest.values() if p.surface == "admin"]

    def lookup(self, token: str) -> Principal | None:
        # One dict probe by the token's SHA-256 digest.
        # Hashing first keeps the probe's timing independent of the token's bytes: it can
        # only tell how much of two digests agree, which reveals nothing about a token.
        return self._by_digest.get(_digest(token))


def bearer_token(header: str | None) -> str:
    """The token of an Authorization header; 401 unless it is exactly `Bearer <token>`."""
    if not header:
        raise Unauthorized("missing bearer token")
    # Exactly "Bearer <token>": the token is compared as sent, so "Bearer fin " (or a
    # tab, or two spaces) is not the token "fin".
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return token


def authenticate(registry: TokenRegistry, authorization: str | None) -> Principal:
    """Who an Authorization header names; 401 unless it is `Bearer <a known token>`."""
    principal = registry.lookup(bearer_token(authorization))
    if principal is None:
        raise Unauthorized("unknown token")
    return principal


def _principal(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    throttle: AuthThrottle = connection.app.state.auth_throttle
    refuse_if_blocked(throttle, connection.scope)
    try:
        principal = authenticate(connection.app.state.tokens, connection.headers.get("authorization"))
    except Unauthorized:
        record_failure(throttle, connection.scope)
        raise
    connection.state.principal = principal
    structlog.contextvars.bind_contextvars(actor=principal.identity)
    return principal


async def gateway_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    if _principal(connection).surface != "gateway":
        raise Forbidden("this token may not call the gateway surface")


async def admin_guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    principal = _principal(connection)
    if principal.surface != "admin":
        raise Forbidden("this token may not call the admin surface")
    needed: Role = handler.opt.get("role", "viewer")
    if ROLES.index(principal.role) < ROLES.index(needed):
        raise Forbidden(f"role {principal.role} may not do this; {needed} or above is required")


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    principal: Principal = connection.state.principal
    return principal
