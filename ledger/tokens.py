"""Bearer tokens and secrets as configured: `LEDGER_*_TOKENS` entries, and `*_FILE` variants.

Entries:
- `LEDGER_GATEWAY_TOKENS`: `token` or `token:name`;
- `LEDGER_ADMIN_TOKENS`: `token:role` or `token:role:name`, roles viewer, finance, admin.

A token may not contain `:` or `,` (the separators), so every entry parses one way
only. A name (`[a-z0-9._-]{1,64}`) is what the audit log records for that token
instead of its keyed fingerprint; several tokens may share a name (a rotation).

Each value may come from the variable or from a file named by `<VARIABLE>_FILE`
(container secrets): one entry per line or comma separated, blank lines and
surrounding whitespace ignored. Giving both the variable and its file is an error.
Error messages name the variable and the entry's position, never a token.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, NamedTuple

Role = Literal["viewer", "finance", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "finance", "admin")
NAME = re.compile(r"[a-z0-9._-]{1,64}")


class SettingsError(ValueError):
    """A `LEDGER_*` variable has a value that cannot be used."""


class GatewayToken(NamedTuple):
    token: str
    name: str | None = None


class AdminToken(NamedTuple):
    token: str
    role: Role
    name: str | None = None


class Configured(NamedTuple):
    """A value read from the environment, and the variable it came from (for messages)."""

    value: str | None
    source: str


def read_value(env: dict[str, str], name: str) -> Configured:
    """`name` from the environment, or the contents of the file `name_FILE` names."""
    direct = env.get(name) or None
    path = env.get(f"{name}_FILE") or None
    if direct is not None and path is not None:
        raise SettingsError(f"{name} and {name}_FILE are both set; give one of them")
    if path is None:
        return Configured(direct, name)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark is not part of a token
    except OSError as exc:
        raise SettingsError(f"{name}_FILE: cannot read {path!r} ({exc.strerror or exc})") from exc
    return Configured(text, f"{name}_FILE")


def read_secret(env: dict[str, str], name: str, minimum: int = 32) -> str | None:
    """A secret (key) from `name` or `name_FILE`, surrounding whitespace dropped; at least `minimum` chars."""
    configured = read_value(env, name)
    secret = configured.value.strip() if configured.value is not None else None
    if not secret:
        return None
    if len(secret) < minimum:
        raise SettingsError(f"{configured.source} must be at least {minimum} characters")
    return secret


def entries(raw: str | None) -> list[str]:
    if not raw:
        return []
    return [part.strip() for line in raw.splitlines() for part in line.split(",") if part.strip()]


def _name(source: str, index: int, name: str) -> str:
    if not NAME.fullmatch(name):
        raise SettingsError(f"{source} entry {index}: the name must match [a-z0-9._-]{{1,64}}, got {name!r}")
    return name


def gateway_tokens(configured: Configured) -> tuple[GatewayToken, ...]:
    found: list[GatewayToken] = []
    for index, item in enumerate(entries(configured.value), 1):
        parts = item.split(":")
        if len(parts) > 2 or not parts[0]:
            raise SettingsError(
                f"{configured.source} entry {index} must be token or token:name (a token has no ':')"
            )
        name = _name(configured.source, index, parts[1]) if len(parts) == 2 else None
        found.append(GatewayToken(parts[0], name))
    return tuple(found)


def admin_tokens(configured: Configured) -> tuple[AdminToken, ...]:
    found: list[AdminToken] = []
    for index, item in enumerate(entries(configured.value), 1):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise SettingsError(
                f"{configured.source} entry {index} must be token:role or token:role:name "
                "(a token has no ':')"
            )
        role = parts[1]
        if role not in ROLES:
            roles = ", ".join(ROLES)
            raise SettingsError(f"{configured.source} entry {index}: the role must be one of {roles}")
        name = _name(configured.source, index, parts[2]) if len(parts) == 3 else None
        found.append(AdminToken(parts[0], role, name))
    return tuple(found)
