"""Who a token is, without anything from which the token could be recovered.

A token's recorded identity (audit log, journal transactions' and holds' `actor`, logs,
the console session) is `role:name` when the operator named it, else
`role:<fingerprint>`, the fingerprint being the first 16 hex digits of
HMAC-SHA256(identity key, token). Without the key the fingerprint tells nothing
about the token, and no offline search can test a guess against it.

The identity key is `LEDGER_IDENTITY_SECRET` (32+ characters). Every process that
serves the same ledger must share it, so that one token has one identity in every
web worker and replica: outside embedded mode `ledger serve` refuses to start
without it. In embedded (development) mode without it, a random key is created once
in `LEDGER_DATA_DIR/identity.key` (mode 0600) and reused, so identities are stable
across restarts of that data folder.

Outside embedded mode, `ledger serve` also refuses any token shorter than
`MIN_TOKEN_LENGTH` characters (`serve_refusal`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from ledger.settings import Settings, SettingsError

MIN_TOKEN_LENGTH = 32
FINGERPRINT_HEX = 16
KEY_FILE = "identity.key"


def identity_key(settings: Settings) -> bytes:
    """The key of the keyed fingerprints; SettingsError when none can be had."""
    if settings.identity_secret is not None:
        return settings.identity_secret.encode()
    if not settings.embedded:
        raise SettingsError(
            "LEDGER_IDENTITY_SECRET (or LEDGER_IDENTITY_SECRET_FILE) must be set: 32+ characters, "
            "the same on every process, so each token has one identity"
        )
    return _embedded_key(settings.data_dir / KEY_FILE)


def _embedded_key(path: Path) -> bytes:
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_hex(32).encode()
    try:
        # O_EXCL: two processes starting at once keep the first one's key.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as out:
        out.write(key)
    return key


def derived_key(key: bytes, purpose: str) -> bytes:
    """A key for one purpose (e.g. the console's cookies), derived from the identity key."""
    return hmac.new(key, b"ledger-derive|" + purpose.encode(), hashlib.sha256).digest()


def fingerprint(key: bytes, token: str) -> str:
    return hmac.new(key, b"token|" + token.encode(), hashlib.sha256).hexdigest()[:FINGERPRINT_HEX]


def serve_refusal(settings: Settings) -> str | None:
    """Why `ledger serve` must not start with these settings (never naming a token), or None."""
    if settings.embedded:
        return None
    for source, tokens in (
        (settings.gateway_tokens_source, [t.token for t in settings.gateway_tokens]),
        (settings.admin_tokens_source, [t.token for t in settings.admin_tokens]),
    ):
        for index, token in enumerate(tokens, 1):
            if len(token) < MIN_TOKEN_LENGTH:
                return (
                    f"{source} entry {index}: the token is shorter than {MIN_TOKEN_LENGTH} characters "
                    "(outside embedded mode every token must be at least that long)"
                )
    try:
        identity_key(settings)
    except SettingsError as error:
        return str(error)
    return None
