"""Console sessions: a signed cookie naming who logged in, and the CSRF tokens derived from it.

Invariants:
- the cookie never holds the admin token: only the token's keyed fingerprint
  (`ledger.identity`), its role, a random nonce and an expiry, signed with HMAC-SHA256
  under the console key (`LEDGER_CONSOLE_SECRET`, else derived from the identity key,
  so every process that shares the identity key shares the console key);
- a cookie is honoured only while its signature verifies, it has not expired, its
  fingerprint still belongs to a configured admin token with the same role (removing
  a token from `LEDGER_ADMIN_TOKENS` and restarting ends its sessions), and its nonce
  names a live row of `console_sessions` (`sessions.py`: logout revokes it there);
- the CSRF token of a session is HMAC(key, "csrf" | nonce): a page can embed it, the
  cookie cannot be derived from it, and a forged form from another site has neither;
- before login, a separate short-lived nonce cookie and the login form's hidden field
  must match (double submit), so another site cannot log a browser in as someone else.

This module is the cookie's half (no I/O); the database's half is `sessions.py`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

import msgspec

from ledger.http.auth import Principal, TokenRegistry
from ledger.identity import derived_key
from ledger.settings import Settings

SESSION_COOKIE = "ledger_console"
LOGIN_COOKIE = "ledger_console_login"
COOKIE_PATH = "/console"
SESSION_SECONDS = 8 * 3600
LOGIN_NONCE_SECONDS = 900


class SessionData(msgspec.Struct, frozen=True):
    fingerprint: str
    role: str
    nonce: str
    expires: int


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class ConsoleKeys:
    """The signing key and the admin principals a session may name (by fingerprint)."""

    key: bytes
    principals: dict[str, Principal]

    @classmethod
    def from_settings(cls, settings: Settings, registry: TokenRegistry) -> ConsoleKeys:
        if settings.console_secret:
            key = settings.console_secret.encode()
        else:
            key = derived_key(registry.key, "console-session")
        principals = {p.fingerprint: p for p in registry.admin_principals()}
        return cls(key=key, principals=principals)

    def _mac(self, purpose: bytes, payload: bytes) -> bytes:
        return hmac.new(self.key, purpose + b"|" + payload, hashlib.sha256).digest()

    def issue(self, principal: Principal, *, now: float | None = None) -> tuple[str, SessionData]:
        moment = int(time.time() if now is None else now)
        data = SessionData(
            fingerprint=principal.fingerprint,
            role=principal.role,
            nonce=secrets.token_urlsafe(16),
            expires=moment + SESSION_SECONDS,
        )
        payload = msgspec.json.encode(data)
        return f"{_b64(payload)}.{_b64(self._mac(b'session', payload))}", data

    def read(self, cookie: str | None, *, now: float | None = None) -> tuple[SessionData, Principal] | None:
        """The session and its principal, or None for a missing, forged, expired or revoked cookie."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, signature = cookie.split(".")
        try:
            payload, mac = _unb64(body), _unb64(signature)
        except (ValueError, TypeError):
            return None
        if not hmac.compare_digest(mac, self._mac(b"session", payload)):
            return None
        try:
            data = msgspec.json.decode(payload, type=SessionData)
        except msgspec.MsgspecError:
            return None
        if data.expires <= int(time.time() if now is None else now):
            return None
        principal = self.principals.get(data.fingerprint)
        if principal is None or principal.role != data.role:
            return None
        return data, principal

    def csrf_token(self, nonce: str) -> str:
        return _b64(self._mac(b"csrf", nonce.encode()))

    def csrf_ok(self, nonce: str, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(self.csrf_token(nonce), str(submitted))


def login_nonce() -> str:
    return secrets.token_urlsafe(16)
