"""ledger.database_url: every accepted form parses to one DatabaseURL; what libpq and SQLAlchemy get."""

from __future__ import annotations

import subprocess
import sys

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url

from ledger.database_url import DatabaseURL, DatabaseURLError, Host
from ledger.settings import SettingsError, load_settings, normalize_database_url
from tests.serving import ROOT

AUTOCTL = "postgres://127.0.0.1:6001,127.0.0.1:6002/ledger?target_session_attrs=read-write&sslmode=prefer"
PASSWORD = "p@ss:w/rd%?#&= 'q\\u"

# Each accepted form, and the libpq parameters it must give.
FORMS = [
    (
        AUTOCTL,
        {
            "host": "127.0.0.1,127.0.0.1",
            "port": "6001,6002",
            "dbname": "ledger",
            "target_session_attrs": "read-write",
            "sslmode": "prefer",
        },
    ),
    (
        "postgresql+psycopg://svc@/ledger?host=10.0.0.1:5432&host=10.0.0.2:5433&target_session_attrs=read-write",
        {
            "host": "10.0.0.1,10.0.0.2",
            "port": "5432,5433",
            "dbname": "ledger",
            "user": "svc",
            "target_session_attrs": "read-write",
        },
    ),
    (
        "postgresql://svc@/ledger?host=db1,db2&port=5432,5433&target_session_attrs=prefer-standby",
        {
            "host": "db1,db2",
            "port": "5432,5433",
            "dbname": "ledger",
            "user": "svc",
            "target_session_attrs": "prefer-standby",
        },
    ),
    (
        "postgresql://postgres:@/postgres?host=/tmp/ldgpg1234",  # pgserver's get_uri()
        {"host": "/tmp/ldgpg1234", "dbname": "postgres", "user": "postgres", "password": ""},
    ),
    (
        "postgresql+psycopg://postgres@/ledger?host=%2Fwork%2F.ledger%2Fpg",  # ledger.embedded
        {"host": "/work/.ledger/pg", "dbname": "ledger", "user": "postgres"},
    ),
    (
        "postgresql://u@/db?host=/run/postgresql&port=5433",
        {"host": "/run/postgresql", "port": "5433", "dbname": "db", "user": "u"},
    ),
    (
        "postgres://u@[::1]:5433,db2/ledger",
        {"host": "::1,db2", "port": "5433,", "dbname": "ledger", "user": "u"},
    ),
    ("postgresql://localhost/ledger", {"host": "localhost", "dbname": "ledger"}),
    ("postgresql+psycopg://u@h:5432/db", {"host": "h", "port": "5432", "dbname": "db", "user": "u"}),
]


@pytest.mark.parametrize(("raw", "expected"), FORMS)
def test_each_form_gives_libpq_these_parameters(raw: str, expected: dict[str, str]) -> None:
    url = DatabaseURL.parse(raw)
    assert url.libpq_params() == expected
    # libpq's own parser reads the conninfo back to exactly these values
    assert conninfo_to_dict(url.conninfo()) == expected


@pytest.mark.parametrize(("raw", "expected"), FORMS)
def test_both_renderings_parse_back_to_the_same_url(raw: str, expected: dict[str, str]) -> None:
    url = DatabaseURL.parse(raw)
    assert DatabaseURL.parse(url.sqlalchemy()) == url
    assert DatabaseURL.parse(url.libpq()) == url
    assert url.sqlalchemy().startswith("postgresql+psycopg://")


def test_the_autoctl_url_and_sqlalchemys_multi_host_form_are_one_url() -> None:
    autoctl = DatabaseURL.parse(AUTOCTL)
    sqlalchemy_form = DatabaseURL.parse(
        "postgresql+psycopg:///ledger?host=127.0.0.1:6001&host=127.0.0.1:6002"
        "&sslmode=prefer&target_session_attrs=read-write"
    )
    assert autoctl == sqlalchemy_form
    assert autoctl.hosts == (Host("127.0.0.1", 6001), Host("127.0.0.1", 6002))
    assert autoctl.multi_host


def test_sqlalchemy_reads_the_rendered_form_as_libpq_does() -> None:
    """The settings carry `sqlalchemy()`; SQLAlchemy's own psycopg dialect reads it to the same
    parameters as ours (the service never lets it, but an operator's tool might)."""
    url = DatabaseURL.parse(AUTOCTL.replace("postgres://", f"postgres://svc:{_quoted(PASSWORD)}@"))
    _, params = PGDialect_psycopg().create_connect_args(make_url(url.sqlalchemy()))
    params.pop("context", None)
    assert params == url.libpq_params()
    assert params["password"] == PASSWORD


def _quoted(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def test_a_password_with_special_characters_survives_every_conversion() -> None:
    url = DatabaseURL.parse(f"postgresql://svc:{_quoted(PASSWORD)}@db:5432/ledger")
    assert url.password == PASSWORD
    assert conninfo_to_dict(url.conninfo())["password"] == PASSWORD
    assert DatabaseURL.parse(url.sqlalchemy()).password == PASSWORD
    assert DatabaseURL.parse(url.libpq()).password == PASSWORD
    assert PASSWORD not in url.redacted() and "***" in url.redacted()


def test_extra_parameters_go_on_top_and_the_settings_carry_the_sqlalchemy_form() -> None:
    url = DatabaseURL.parse(AUTOCTL)
    info = conninfo_to_dict(url.conninfo(connect_timeout=5, application_name="ledger"))
    assert info["connect_timeout"] == "5" and info["application_name"] == "ledger"
    settings = load_settings({"LEDGER_DATABASE_URL": AUTOCTL, "LEDGER_READ_DATABASE_URL": AUTOCTL})
    assert settings.database_url == url.sqlalchemy()
    assert settings.read_database_url == url.sqlalchemy()
    assert DatabaseURL.parse(settings.database_url) == url


MALFORMED = [
    ("mysql://h/db", "must start with postgresql://"),
    ("postgres://h:port/db", "port 'port' is not a number"),
    ("postgres://h:70000/db", "port '70000'"),
    ("postgres://h:\u00b2/db", "port '\u00b2' is not a number"),  # a digit to str.isdigit, not to int()
    ("postgres://h1:1,h2:2/db?port=3", "ports are given both"),
    ("postgres://h1,h2/db?port=1,2,3", "3 ports for 2 hosts"),
    ("postgres://h/db?host=/tmp", "hosts are given both"),
    ("postgres://h/db?target_session_attrs=rw", "target_session_attrs must be one of"),
    ("postgres://h/db?sslmode=on", "sslmode must be one of"),
    ("postgres://h/db?bogus=1", 'invalid connection option "bogus"'),
    ("postgres://::1:5432/db", "IPv6 address in brackets"),
    ("postgres://h/db?sslmode", "query string is malformed"),
]


@pytest.mark.parametrize(("raw", "why"), MALFORMED)
def test_a_malformed_url_is_one_clear_line(raw: str, why: str) -> None:
    with pytest.raises(DatabaseURLError) as caught:
        DatabaseURL.parse(raw)
    message = str(caught.value)
    assert why in message
    assert message.startswith("LEDGER_DATABASE_URL is not a usable PostgreSQL URL: ")
    assert "\n" not in message
    with pytest.raises(SettingsError):
        normalize_database_url(raw)


def test_the_password_never_appears_in_a_refusal() -> None:
    with pytest.raises(DatabaseURLError) as caught:
        DatabaseURL.parse("postgres://svc:hunter2secret@h:99999/db")
    assert "hunter2secret" not in str(caught.value)


@pytest.mark.parametrize("command", [["migrate"], ["reconcile"], ["prices", "list"]])
def test_every_command_refuses_a_malformed_url_with_exit_2_and_no_traceback(command: list[str]) -> None:
    env = {"PATH": "/usr/bin:/bin", "LEDGER_DATABASE_URL": "postgres://127.0.0.1:6001,127.0.0.1:x/ledger"}
    result = subprocess.run(
        [sys.executable, "-m", "ledger.cli", *command], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "ledger: LEDGER_DATABASE_URL is not a usable PostgreSQL URL: port 'x' is not a number from 1 to 65535"
    ]
