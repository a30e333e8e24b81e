"""Token identities and token settings: keyed fingerprints, names, files, and the start checks.

The start checks run the real CLI (`python -m ledger.cli serve`) as a subprocess: they
must refuse before any database is touched, so the database URL here points nowhere.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.http.auth import TokenRegistry
from ledger.identity import KEY_FILE, identity_key
from ledger.settings import AdminToken, GatewayToken, SettingsError, load_settings
from tests.serving import ROOT

LONG_GATEWAY = "g" * 40
LONG_ADMIN = "a" * 40
SECRET = "s" * 40
SERVICE = {"LEDGER_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none", "LEDGER_IDENTITY_SECRET": SECRET}


def registry(**env: str) -> TokenRegistry:
    return TokenRegistry(load_settings({**SERVICE, **env}))


def test_identity_is_keyed_never_an_unkeyed_hash_of_the_token() -> None:
    token = "short-tok"
    principal = registry(LEDGER_ADMIN_TOKENS=f"{token}:finance").lookup(token)
    assert principal is not None
    role, fingerprint = principal.identity.split(":")
    assert role == "finance"
    assert len(fingerprint) == 16
    for digest in (hashlib.sha256, hashlib.sha1, hashlib.md5, hashlib.sha512, hashlib.blake2b):
        assert not digest(token.encode()).hexdigest().startswith(fingerprint)
    # the same secret gives the same identity (every process), another secret another one
    same = registry(LEDGER_ADMIN_TOKENS=f"{token}:finance").lookup(token)
    other = registry(LEDGER_ADMIN_TOKENS=f"{token}:finance", LEDGER_IDENTITY_SECRET="t" * 40).lookup(token)
    assert same is not None and other is not None
    assert same.identity == principal.identity
    assert other.identity != principal.identity


def test_named_tokens_record_their_name() -> None:
    tokens = registry(
        LEDGER_GATEWAY_TOKENS=f"{LONG_GATEWAY}:edge-1",
        LEDGER_ADMIN_TOKENS=f"{LONG_ADMIN}:finance:alice.b,{'b' * 40}:finance:alice.b,{'c' * 40}:viewer",
    )
    gateway, alice, rotated, unnamed = (
        tokens.lookup(LONG_GATEWAY),
        tokens.lookup(LONG_ADMIN),
        tokens.lookup("b" * 40),
        tokens.lookup("c" * 40),
    )
    assert gateway is not None and gateway.identity == "gateway:edge-1"
    assert alice is not None and alice.identity == "finance:alice.b"
    # two tokens of one name (a rotation) share the identity, not the fingerprint
    assert rotated is not None and rotated.identity == "finance:alice.b"
    assert rotated.fingerprint != alice.fingerprint
    assert unnamed is not None and unnamed.identity.startswith("viewer:") and len(unnamed.identity) == 23


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LEDGER_ADMIN_TOKENS", "secret-value:finance:Alice", "entry 1: the name must match"),
        ("LEDGER_ADMIN_TOKENS", "ok-token:viewer,secret-value:root", "entry 2: the role must be one of"),
        ("LEDGER_ADMIN_TOKENS", "secret-value", "entry 1 must be token:role or token:role:name"),
        ("LEDGER_ADMIN_TOKENS", "secret:value:finance:x", "entry 1 must be token:role or token:role:name"),
        ("LEDGER_GATEWAY_TOKENS", "secret-value:a:b", "entry 1 must be token or token:name"),
        ("LEDGER_GATEWAY_TOKENS", "secret-value:" + "n" * 65, "entry 1: the name must match"),
    ],
)
def test_bad_entries_are_refused_naming_the_variable_not_the_token(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings({**SERVICE, variable: value})
    assert str(refused.value).startswith(variable)
    assert message in str(refused.value)
    assert "secret" not in str(refused.value).replace("SECRET", "")


def test_tokens_and_secrets_from_files(tmp_path: Path) -> None:
    gateway = tmp_path / "gateway"
    gateway.write_text(f"\n  {LONG_GATEWAY}:edge  \n\n{'h' * 40}, {'i' * 40}\n")
    admin = tmp_path / "admin"
    admin.write_text(f"{LONG_ADMIN}:admin:ops\n")
    secret = tmp_path / "identity"
    secret.write_text(SECRET + "\n")
    console = tmp_path / "console"
    console.write_text("k" * 32 + "\n")
    settings = load_settings(
        {
            "LEDGER_DATABASE_URL": SERVICE["LEDGER_DATABASE_URL"],
            "LEDGER_GATEWAY_TOKENS_FILE": str(gateway),
            "LEDGER_ADMIN_TOKENS_FILE": str(admin),
            "LEDGER_IDENTITY_SECRET_FILE": str(secret),
            "LEDGER_CONSOLE_SECRET_FILE": str(console),
        }
    )
    assert settings.gateway_tokens == (
        GatewayToken(LONG_GATEWAY, "edge"),
        GatewayToken("h" * 40),
        GatewayToken("i" * 40),
    )
    assert settings.admin_tokens == (AdminToken(LONG_ADMIN, "admin", "ops"),)
    assert settings.admin_tokens_source == "LEDGER_ADMIN_TOKENS_FILE"
    assert settings.identity_secret == SECRET
    assert settings.console_secret == "k" * 32
    # the same identity as the secret given directly
    from_file = TokenRegistry(settings).lookup(LONG_ADMIN)
    direct = registry(LEDGER_ADMIN_TOKENS=f"{LONG_ADMIN}:admin").lookup(LONG_ADMIN)
    assert from_file is not None and direct is not None
    assert from_file.fingerprint == direct.fingerprint


def test_a_token_file_saved_with_a_byte_order_mark_keeps_its_first_token(tmp_path: Path) -> None:
    """Found in review: a UTF-8 BOM stayed in front of the first token, which then never matched."""
    path = tmp_path / "gateway"
    path.write_bytes(b"\xef\xbb\xbf" + f"{LONG_GATEWAY}\n".encode())
    settings = load_settings(
        {
            "LEDGER_DATABASE_URL": SERVICE["LEDGER_DATABASE_URL"],
            "LEDGER_GATEWAY_TOKENS_FILE": str(path),
            "LEDGER_IDENTITY_SECRET": SECRET,
        }
    )
    assert settings.gateway_tokens == (GatewayToken(LONG_GATEWAY),)


def test_variable_and_its_file_together_or_an_unreadable_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(LONG_GATEWAY)
    with pytest.raises(SettingsError, match="LEDGER_GATEWAY_TOKENS and LEDGER_GATEWAY_TOKENS_FILE"):
        load_settings(
            {**SERVICE, "LEDGER_GATEWAY_TOKENS": LONG_GATEWAY, "LEDGER_GATEWAY_TOKENS_FILE": str(path)}
        )
    with pytest.raises(SettingsError, match="LEDGER_ADMIN_TOKENS_FILE: cannot read"):
        load_settings({**SERVICE, "LEDGER_ADMIN_TOKENS_FILE": str(tmp_path / "missing")})
    short = tmp_path / "short"
    short.write_text("too-short\n")
    with pytest.raises(SettingsError, match="LEDGER_IDENTITY_SECRET_FILE must be at least 32"):
        load_settings({**SERVICE, "LEDGER_IDENTITY_SECRET": "", "LEDGER_IDENTITY_SECRET_FILE": str(short)})


def test_embedded_mode_keeps_one_random_identity_key_in_the_data_dir(tmp_path: Path) -> None:
    settings = load_settings({"LEDGER_DATA_DIR": str(tmp_path / "data")})
    assert settings.embedded and settings.identity_secret is None
    first = identity_key(settings)
    assert len(first) == 64
    path = tmp_path / "data" / KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert identity_key(load_settings({"LEDGER_DATA_DIR": str(tmp_path / "data")})) == first
    assert identity_key(load_settings({"LEDGER_DATA_DIR": str(tmp_path / "other")})) != first
    # outside embedded mode there is no such fallback
    with pytest.raises(SettingsError, match="LEDGER_IDENTITY_SECRET"):
        identity_key(load_settings({"LEDGER_DATABASE_URL": SERVICE["LEDGER_DATABASE_URL"]}))


def serve(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "serve", "--port", "1"],
        cwd=ROOT,
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "variable", "token"),
    [
        (
            {"LEDGER_GATEWAY_TOKENS": "gw-short-7", "LEDGER_ADMIN_TOKENS": f"{LONG_ADMIN}:admin"},
            "LEDGER_GATEWAY_TOKENS entry 1",
            "gw-short-7",
        ),
        (
            {
                "LEDGER_GATEWAY_TOKENS": LONG_GATEWAY,
                "LEDGER_ADMIN_TOKENS": f"{LONG_ADMIN}:admin,adm-short-9:viewer",
            },
            "LEDGER_ADMIN_TOKENS entry 2",
            "adm-short-9",
        ),
    ],
)
def test_serve_refuses_short_tokens_outside_embedded_mode(
    env: dict[str, str], variable: str, token: str
) -> None:
    done = serve({**SERVICE, **env})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert variable in lines[0]
    assert "shorter than 32 characters" in lines[0]
    assert token not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_serve_refuses_a_short_token_from_a_file_naming_the_file_variable(tmp_path: Path) -> None:
    path = tmp_path / "gateway"
    path.write_text(f"{LONG_GATEWAY}\nfile-short-3\n")
    done = serve(
        {**SERVICE, "LEDGER_GATEWAY_TOKENS_FILE": str(path), "LEDGER_ADMIN_TOKENS": f"{LONG_ADMIN}:admin"}
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("ledger serve: LEDGER_GATEWAY_TOKENS_FILE entry 2")
    assert "file-short-3" not in done.stderr


def test_serve_refuses_to_start_without_an_identity_secret_outside_embedded_mode() -> None:
    env = {**SERVICE, "LEDGER_GATEWAY_TOKENS": LONG_GATEWAY, "LEDGER_IDENTITY_SECRET": ""}
    done = serve(env)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "LEDGER_IDENTITY_SECRET" in done.stderr
    assert LONG_GATEWAY not in done.stderr


def test_embedded_mode_keeps_its_short_dev_tokens(tmp_path: Path) -> None:
    from ledger.identity import serve_refusal

    dev = load_settings({"LEDGER_DATA_DIR": str(tmp_path)})
    assert dev.dev_tokens and serve_refusal(dev) is None
    assert (
        serve_refusal(load_settings({"LEDGER_DATA_DIR": str(tmp_path), "LEDGER_GATEWAY_TOKENS": "gw"}))
        is None
    )
