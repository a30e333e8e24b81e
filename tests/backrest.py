"""pgBackRest for the tests: the shipped configuration (`deploy/pgbackrest/`) with its paths replaced.

The restore drill and the archiving-across-failover test run pgBackRest exactly as
deployed: `pgbackrest.conf`'s options and `archive.conf`'s archive_command, with only the
repository, log and lock folders and the node's data directory, port and socket moved to
where the test runs its clusters.
"""

from __future__ import annotations

import configparser
from pathlib import Path

from tests.pgcluster import as_postgres
from tests.serving import ROOT

DEPLOY = ROOT / "deploy" / "pgbackrest"
STANZA = "ledger"
SHIPPED_ARCHIVE_COMMAND = "pgbackrest --stanza=ledger archive-push %p"


def render_config(
    path: Path, *, repo: Path, logs: Path, locks: Path, pgdata: Path, port: int, socket: str
) -> Path:
    """The deployed pgbackrest.conf at `path`, with these locations; every other option as shipped."""
    conf = configparser.ConfigParser(interpolation=None, strict=True)
    conf.optionxform = str  # type: ignore[assignment,method-assign]  # pgBackRest's keys are case-sensitive
    conf.read(DEPLOY / "pgbackrest.conf")
    conf["global"].update({"repo1-path": str(repo), "log-path": str(logs), "lock-path": str(locks)})
    conf[STANZA].update({"pg1-path": str(pgdata), "pg1-port": str(port), "pg1-socket-path": socket})
    with path.open("w") as out:
        conf.write(out, space_around_delimiters=False)
    return path


def archive_command(config: Path) -> str:
    """The deployed archive_command, reading `config` instead of /etc/pgbackrest/pgbackrest.conf."""
    shipped = (DEPLOY / "archive.conf").read_text()
    assert f"archive_command = '{SHIPPED_ARCHIVE_COMMAND}'" in shipped, "archive.conf changed its command"
    return SHIPPED_ARCHIVE_COMMAND.replace("pgbackrest ", f"pgbackrest --config={config} ", 1)


def render_archive_conf(path: Path, config: Path) -> Path:
    """The deployed archive.conf at `path`, its archive_command reading `config`."""
    text = (DEPLOY / "archive.conf").read_text()
    path.write_text(text.replace(SHIPPED_ARCHIVE_COMMAND, archive_command(config)))
    return path


def pgbackrest(config: Path, *args: str) -> str:
    """One pgbackrest command on the stanza, as the postgres user; its standard output."""
    done = as_postgres(["pgbackrest", f"--config={config}", f"--stanza={STANZA}", *args], timeout=300)
    return done.stdout
