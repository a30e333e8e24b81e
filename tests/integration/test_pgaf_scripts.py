"""The scripts compose.ha.yaml runs on its database containers build a working formation.

`deploy/pgaf/monitor.sh` and `deploy/pgaf/node.sh` run here as they run in their
containers, on loopback instead of a compose network (ports and host name from the
variables the scripts read; the node's archive.conf pointed at a pgBackRest configuration
in a temporary folder). Then: a primary and a synchronous secondary (as the monitor sees
them, and `pg_stat_replication` on the primary), archive_mode on and pgBackRest's
archive_command on both nodes (the include works, on the clone too), `pgbackrest check`
passes on the primary (its WAL reaches the repository), and the ledger's two roles exist,
`ledger` owning the database, so that `ledger migrate` as the owner with
LEDGER_SERVICE_ROLE=ledger_service succeeds. Not covered here: passwords and TLS (on loopback
initdb's own `trust` lines come first in pg_hba.conf), and the image itself (no Docker).

Fails rather than skips under CI when pgBackRest or pg_auto_failover is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.backrest import pgbackrest, render_archive_conf, render_config
from tests.formation import PG_AUTOCTL, available
from tests.pgcluster import SERVICE_USER, Workspace, missing_prerequisites, postgres_bin
from tests.serving import ROOT, free_port

MISSING = missing_prerequisites("pgbackrest") + ([] if available() else ["pg_autoctl"])
SCRIPTS = ROOT / "deploy" / "pgaf"

pytestmark = pytest.mark.skipif(
    bool(MISSING) and not os.environ.get("CI"), reason=f"missing: {', '.join(MISSING)} (and CI is unset)"
)


class Scripts:
    """The monitor and node scripts as processes (each in a session of its own), in a workspace."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        home = workspace.folder("home")
        for sub in ("config", "data", "run"):
            workspace.folder(f"home/{sub}")
        self.env = {
            "PATH": f"{postgres_bin()}:{Path(PG_AUTOCTL).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "XDG_CONFIG_HOME": f"{home}/config",
            "XDG_DATA_HOME": f"{home}/data",
            "XDG_RUNTIME_DIR": f"{home}/run",
            "LANG": "C.UTF-8",
            "PGAF_HOSTNAME": "127.0.0.1",
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pgdatas: list[Path] = []

    def run(self, script: str, name: str, port: int, extra: dict[str, str]) -> Path:
        pgdata = self.workspace.root / name
        env = self.env | extra | {"PGDATA": str(pgdata), "PGPORT": str(port), "PGAF_NAME": name}
        log = open(self.workspace.root / f"{name}.log", "wb")  # noqa: SIM115  # the child keeps it
        self.procs.append(
            subprocess.Popen(
                ["sh", str(SCRIPTS / script)],
                env=env,
                cwd=self.workspace.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=SERVICE_USER,
                group=SERVICE_USER,
                extra_groups=[],
            )
        )
        self.pgdatas.append(pgdata)
        return pgdata

    def log(self, name: str) -> str:
        return (self.workspace.root / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for pgdata in reversed(self.pgdatas):
            with contextlib.suppress(Exception):
                subprocess.run(
                    [PG_AUTOCTL, "stop", "--pgdata", str(pgdata), "--fast"],
                    env=self.env,
                    user=SERVICE_USER,
                    capture_output=True,
                    timeout=30,
                )
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def scripts() -> Iterator[Scripts]:
    assert not MISSING, f"CI is set but this machine lacks {', '.join(MISSING)}"
    workspace = Workspace("lds")
    made = Scripts(workspace)
    try:
        yield made
    finally:
        made.stop()
        workspace.close()


def _until(ready: Callable[[], bool], what: str, logs: Callable[[], str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(psycopg.Error):
            if ready():
                return
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{logs()}"
        time.sleep(0.5)


def _one(url: str, statement: str) -> object:
    with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
        row = conn.execute(statement.encode()).fetchone()
        return row[0] if row else None


def test_the_deploy_scripts_build_a_synchronous_pair_that_archives(scripts: Scripts) -> None:
    workspace = scripts.workspace
    monitor_port, ports = free_port(), {"node1": free_port(), "node2": free_port()}
    urls = {name: f"postgresql://postgres@127.0.0.1:{port}/ledger" for name, port in ports.items()}
    monitor_url = f"postgresql://postgres@127.0.0.1:{monitor_port}/pg_auto_failover"

    scripts.run("monitor.sh", "monitor", monitor_port, {})
    _until(
        lambda: _one(monitor_url, "SELECT count(*) FROM pgautofailover.formation") == 1,
        "the monitor",
        lambda: scripts.log("monitor"),
    )
    config = render_config(
        workspace.root / "pgbackrest.conf",
        repo=workspace.folder("repo"),
        logs=workspace.folder("log"),
        locks=workspace.folder("lock"),
        pgdata=workspace.root / "node1",
        port=ports["node1"],
        socket="/var/run/postgresql",
    )
    archive = render_archive_conf(workspace.root / "archive.conf", config)
    node_env = {
        "PG_AUTOCTL_MONITOR": f"postgres://autoctl_node@127.0.0.1:{monitor_port}/pg_auto_failover?sslmode=require",
        "LEDGER_OWNER_PASSWORD": "owner-password-for-the-test",
        "LEDGER_SERVICE_PASSWORD": "service-password-for-the-test",
        "PGBACKREST_ARCHIVE_CONF": str(archive),
    }
    scripts.run("node.sh", "node1", ports["node1"], node_env)
    _until(
        lambda: (
            _one(urls["node1"], "SELECT count(*) FROM pg_roles WHERE rolname IN ('ledger', 'ledger_service')")
            == 2
        ),
        "node1 as primary with the ledger's roles",
        lambda: scripts.log("node1"),
    )
    pgbackrest(config, "stanza-create")
    scripts.run("node.sh", "node2", ports["node2"], node_env)
    states = (
        "SELECT string_agg(nodename || ':' || reportedstate || ':' || goalstate, ' ' ORDER BY nodename) "
        "FROM pgautofailover.node"
    )
    want = "node1:primary:primary node2:secondary:secondary"

    def formed() -> bool:
        if _one(monitor_url, states) == want:
            return True
        with contextlib.suppress(psycopg.Error):
            _one(urls["node1"], "CHECKPOINT")  # pg_basebackup waits for a checkpoint otherwise
        return False

    _until(formed, "node1 primary and node2 secondary", lambda: scripts.log("node2"), timeout=180)

    assert _one(urls["node1"], "SELECT sync_state FROM pg_stat_replication") in ("quorum", "sync")
    assert str(_one(urls["node1"], "SHOW synchronous_standby_names")).startswith("ANY 1")
    for name in ("node1", "node2"):
        assert _one(urls[name], "SHOW archive_mode") == "on", name
        assert str(_one(urls[name], "SHOW archive_command")).startswith(f"pgbackrest --config={config} "), (
            name
        )
    assert (
        _one(urls["node2"], "SELECT rolname FROM pg_roles WHERE rolname = 'ledger_service'")
        == "ledger_service"
    )
    assert (
        _one(urls["node1"], "SELECT datdba::regrole::text FROM pg_database WHERE datname = 'ledger'")
        == "ledger"
    )
    pgbackrest(config, "check")  # node1's WAL reaches the repository

    owner = f"postgresql://ledger@127.0.0.1:{ports['node1']}/ledger"
    env = {**os.environ, "LEDGER_DATABASE_URL": owner, "LEDGER_SERVICE_ROLE": "ledger_service"}
    migrated = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "migrate"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    assert '"granted": "ledger_service"' in migrated.stdout
