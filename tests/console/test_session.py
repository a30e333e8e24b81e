"""Session cookies and CSRF tokens, without HTTP: signature, expiry, revocation, role."""

from __future__ import annotations

import base64

from ledger.console.session import SESSION_SECONDS, ConsoleKeys
from ledger.http.auth import Principal, TokenRegistry
from ledger.settings import load_settings

ENV = {
    "LEDGER_DATABASE_URL": "postgresql://x@h/db",
    "LEDGER_ADMIN_TOKENS": "tok-a:finance,tok-b:viewer",
    "LEDGER_IDENTITY_SECRET": "i" * 40,
}


def keys(**extra: str) -> ConsoleKeys:
    settings = load_settings({**ENV, **extra})
    return ConsoleKeys.from_settings(settings, TokenRegistry(settings))


def principal(k: ConsoleKeys, role: str) -> Principal:
    return next(p for p in k.principals.values() if p.role == role)


def test_cookie_round_trip_carries_no_token() -> None:
    k = keys()
    cookie, data = k.issue(principal(k, "finance"))
    assert "tok-a" not in cookie
    assert b"tok-a" not in base64.urlsafe_b64decode(cookie.split(".")[0] + "==")
    found = k.read(cookie)
    assert found is not None
    assert found[0] == data
    assert found[1].role == "finance"


def test_tampered_expired_and_foreign_cookies_are_refused() -> None:
    k = keys()
    cookie, _ = k.issue(principal(k, "viewer"), now=1000)
    assert k.read(cookie, now=1000 + SESSION_SECONDS - 1) is not None
    assert k.read(cookie, now=1000 + SESSION_SECONDS) is None
    body, mac = cookie.split(".")
    forged_payload = base64.urlsafe_b64decode(body + "==").replace(b'"viewer"', b'"finance"')
    forged = base64.urlsafe_b64encode(forged_payload).rstrip(b"=").decode() + "." + mac
    assert k.read(forged, now=1000) is None
    assert k.read(cookie + "x", now=1000) is None
    assert k.read("not-a-cookie") is None
    assert k.read("") is None
    # a process with another identity key (hence console key) does not accept it
    assert keys(LEDGER_IDENTITY_SECRET="j" * 40).read(cookie, now=1000) is None


def test_shared_secret_lets_another_process_accept_the_cookie() -> None:
    secret = "s" * 40
    a, b = keys(LEDGER_CONSOLE_SECRET=secret), keys(LEDGER_CONSOLE_SECRET=secret)
    cookie, _ = a.issue(principal(a, "finance"))
    assert b.read(cookie) is not None


def test_removed_token_or_changed_role_ends_the_session() -> None:
    secret = "s" * 40
    before = keys(LEDGER_CONSOLE_SECRET=secret)
    cookie, _ = before.issue(principal(before, "finance"))
    assert keys(LEDGER_CONSOLE_SECRET=secret, LEDGER_ADMIN_TOKENS="tok-b:viewer").read(cookie) is None
    assert keys(LEDGER_CONSOLE_SECRET=secret, LEDGER_ADMIN_TOKENS="tok-a:viewer").read(cookie) is None


def test_csrf_token_is_bound_to_the_session_nonce() -> None:
    k = keys()
    _, one = k.issue(principal(k, "finance"))
    _, two = k.issue(principal(k, "finance"))
    token = k.csrf_token(one.nonce)
    assert k.csrf_ok(one.nonce, token)
    assert not k.csrf_ok(two.nonce, token)
    assert not k.csrf_ok(one.nonce, None)
    assert not k.csrf_ok(one.nonce, "")


def test_short_console_secret_is_refused() -> None:
    import pytest

    from ledger.settings import SettingsError

    with pytest.raises(SettingsError):
        load_settings({**ENV, "LEDGER_CONSOLE_SECRET": "short"})
