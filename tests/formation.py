"""A pg_auto_failover formation for tests: a monitor and two PostgreSQL nodes on loopback.

`Formation(root)` builds everything under `root` (a temporary folder), runs every
`pg_autoctl` as the `postgres` user when the tests run as root, and picks free loopback
ports. Each keeper runs in a session (process group) of its own, so `kill_primary()`
can SIGKILL a node's keeper, its services and its postmaster at once, as a machine
that loses power would. `stop()` stops every keeper and kills what is left; it is safe
to call twice and after a failed `start()`.

    formation = Formation(tmp_path)
    try:
        formation.start()
        url = formation.uri()      # what `pg_autoctl show uri` prints, libpq multi-host form
        old = formation.primary()
        formation.switchover()
        new = formation.wait_primary(exclude=old)
    finally:
        formation.stop()

The monitor's health checks are tightened (about 2 s to call a node unhealthy instead
of 20 s, and 3 s instead of 30 s to wait for a lost primary to demote itself) so that a
hard failover finishes within a test's budget; everything else is pg_auto_failover's
default, including synchronous replication with two nodes
(`synchronous_standby_names = ANY 1 (...)`, `synchronous_commit = on`).

`available()` says whether pg_autoctl and the PostgreSQL binaries are installed
(`.ci/run` installs Debian's `postgresql-15-auto-failover` and `pg-auto-failover-cli`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg

PG_BIN = Path(os.environ.get("LEDGER_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_AUTOCTL = shutil.which("pg_autoctl") or "/usr/bin/pg_autoctl"
DBNAME = "ledger"
USER = "postgres"  # the nodes trust every local connection; the tests connect as this role

# Monitor settings (pgautofailover.*): how soon an unreachable node is declared unhealthy.
FAST_HEALTH_CHECKS = {
    "health_check_period": "'1s'",  # between checks
    "health_check_timeout": "'1s'",
    "health_check_max_retries": "1",
    "health_check_retry_delay": "'500ms'",
    "node_considered_unhealthy_timeout": "'2s'",
    # After a primary is lost the secondary waits this long (for the old primary to have
    # demoted itself) before it is promoted: 30 s by default.
    "primary_demote_timeout": "'3s'",
}


EXTENSION = Path("/usr/share/postgresql/15/extension/pgautofailover.control")


def available() -> bool:
    """pg_autoctl, the monitor's extension and PostgreSQL 15's binaries are installed."""
    return (
        Path(PG_AUTOCTL).exists()
        and EXTENSION.exists()
        and (PG_BIN / "postgres").exists()
        and (PG_BIN / "pg_ctl").exists()
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class FormationError(RuntimeError):
    """The formation did not reach the state asked for in time (the message says which, with logs)."""


@dataclass
class Node:
    """One pg_autoctl keeper and its PostgreSQL."""

    name: str
    port: int
    pgdata: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """libpq URL of this node alone."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DBNAME}?sslmode=disable"

    def postmaster_pid(self) -> int | None:
        try:
            first = (self.pgdata / "postmaster.pid").read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        return int(first) if first.strip().isdigit() else None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Formation:
    """A monitor and `nodes` PostgreSQL nodes (default 2) under `root`; see the module docstring."""

    def __init__(self, root: Path, *, nodes: int = 2) -> None:
        self.root = Path(root) / "formation"
        self.monitor = Node("monitor", free_port(), self.root / "monitor", self.root / "monitor.log")
        self.nodes = [
            Node(f"node{i}", free_port(), self.root / f"node{i}", self.root / f"node{i}.log")
            for i in range(1, nodes + 1)
        ]
        self._as_root = os.geteuid() == 0

    # --- processes -------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        home = str(self.root / "home")
        return {
            "PATH": f"{PG_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/config",
            "XDG_DATA_HOME": f"{home}/data",
            "XDG_RUNTIME_DIR": f"{home}/run",
            "LANG": "C.UTF-8",
        }

    def _user_args(self) -> dict[str, Any]:
        return {"user": "postgres", "group": "postgres", "extra_groups": []} if self._as_root else {}

    def _autoctl(self, *args: str, timeout: float = 60) -> str:
        """Run one pg_autoctl command to completion; its stdout."""
        result = subprocess.run(
            [PG_AUTOCTL, *args],
            env=self._env(),
            cwd=self.root,
            capture_output=True,
            timeout=timeout,
            **self._user_args(),
        )
        if result.returncode != 0:
            raise FormationError(
                f"pg_autoctl {' '.join(args)} exited {result.returncode}: "
                f"{result.stderr.decode(errors='replace')[-2000:]}"
            )
        out: str = result.stdout.decode()
        return out

    def _spawn(self, node: Node, args: list[str]) -> None:
        node.log = open(node.log_path, "ab")  # noqa: SIM115
        node.proc = subprocess.Popen(
            [PG_AUTOCTL, *args],
            env=self._env(),
            cwd=self.root,
            stdout=node.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill_primary() kills it all
            **self._user_args(),
        )

    # --- life cycle ------------------------------------------------------------------

    def start(self, timeout: float = 180) -> None:
        """Create and run the monitor, then the nodes one after the other; wait for a primary
        and a secondary (synchronously replicating) for every further node."""
        if not available():
            raise FormationError(f"pg_autoctl or PostgreSQL binaries missing ({PG_AUTOCTL}, {PG_BIN})")
        home = self.root / "home"
        for folder in (self.root, home, home / "config", home / "data", home / "run"):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)
            if self._as_root:
                shutil.chown(folder, "postgres", "postgres")
        self._spawn(
            self.monitor,
            [
                "create", "monitor", "--pgdata", str(self.monitor.pgdata),
                "--pgport", str(self.monitor.port), "--hostname", "127.0.0.1",
                "--auth", "trust", "--no-ssl", "--run",
            ],
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        self._wait(lambda: self._monitor_ready(), deadline, "the monitor to accept connections")
        self._tune_monitor()
        monitor_uri = (
            f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"
        )
        for index, node in enumerate(self.nodes):
            self._spawn(
                node,
                [
                    "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                    "--hostname", "127.0.0.1", "--name", node.name, "--auth", "trust", "--no-ssl",
                    "--monitor", monitor_uri, "--dbname", DBNAME, "--run",
                ],
            )  # fmt: skip
            if index == 0:
                self._wait(
                    lambda name=node.name: self._states().get(name) == "single",
                    deadline,
                    f"{node.name} to run as single",
                )
            else:
                want = index + 1
                # pg_basebackup waits for a spread checkpoint on the primary: ask for one now.
                self._wait(
                    lambda want=want: self._checkpoint_primary() or self._settled(want),
                    deadline,
                    f"{node.name} to join as a secondary",
                )

    def stop(self) -> None:
        """Stop every keeper (a fast stop), then kill whatever is left of its process group."""
        for node in [*self.nodes, self.monitor]:
            if node.proc is not None and node.proc.poll() is None:
                with contextlib.suppress(Exception):
                    self._autoctl("stop", "--pgdata", str(node.pgdata), "--fast", timeout=20)
        for node in [*self.nodes, self.monitor]:
            if node.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(10)
                self._kill_group(node)
            pid = node.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if node.log is not None:
                node.log.close()
                node.log = None

    def __enter__(self) -> Formation:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- what the tests use ----------------------------------------------------------

    def uri(self) -> str:
        """The multi-host URL, exactly as `pg_autoctl show uri --formation default` prints it."""
        return self._autoctl(
            "show", "uri", "--pgdata", str(self.monitor.pgdata), "--formation", "default"
        ).strip()

    def state(self) -> list[dict[str, Any]]:
        """The monitor's view: one row per node (name, port, reported and assigned state)."""
        with psycopg.connect(self._monitor_url(), connect_timeout=3, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT nodename, nodeport, reportedstate::text, goalstate::text "
                "FROM pgautofailover.node ORDER BY nodeid"
            ).fetchall()
        return [{"name": r[0], "port": r[1], "reported": r[2], "goal": r[3]} for r in rows]

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def primary(self) -> Node:
        """The node the monitor has as primary (reported and assigned), else FormationError."""
        for row in self.state():
            if row["reported"] in ("primary", "single", "wait_primary") and row["goal"] == row["reported"]:
                return self.node(row["name"])
        raise FormationError(f"no primary now: {self.state()}")

    def wait_primary(self, *, exclude: Node | None = None, timeout: float = 90) -> Node:
        """Wait until a node other than `exclude` is primary and answers writes; that node."""
        deadline = time.monotonic() + timeout
        found: list[Node] = []

        def ready() -> bool:
            try:
                node = self.primary()
            except (FormationError, psycopg.Error):
                return False
            if exclude is not None and node.name == exclude.name:
                return False
            if not self._writable(node):
                return False
            found.append(node)
            return True

        self._wait(ready, deadline, "a new primary")
        return found[-1]

    def wait_secondary(self, timeout: float = 90) -> Node:
        """Wait until some node is a secondary (streaming, in the sync quorum); that node."""
        deadline = time.monotonic() + timeout
        self._wait(lambda: self._settled(len(self.nodes)), deadline, "a secondary")
        return next(self.node(r["name"]) for r in self.state() if r["reported"] == "secondary")

    def switchover(self, timeout: float = 60) -> None:
        """A planned switchover (`pg_autoctl perform switchover`, which waits for it to finish).

        The monitor refuses one while no node holds the primary state (a node that has just
        restarted is still being re-admitted): wait for a settled pair and ask again."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._autoctl("perform", "switchover", "--pgdata", str(self.monitor.pgdata), timeout=120)
                return
            except FormationError as error:
                if "couldn't find the primary node" not in str(error) or time.monotonic() > deadline:
                    raise
            self.wait_secondary()
            time.sleep(0.5)

    def kill_primary(self) -> Node:
        """SIGKILL the current primary's keeper, its services and its postmaster; that node."""
        node = self.primary()
        pid = node.postmaster_pid()
        self._kill_group(node)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return node

    def sql(self, node: Node, statement: str) -> list[tuple[Any, ...]]:
        """Run one statement on a node (autocommit); its rows."""
        with psycopg.connect(node.url, connect_timeout=3, autocommit=True) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []

    # --- internals -------------------------------------------------------------------

    def _monitor_url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def _monitor_ready(self) -> bool:
        try:
            with psycopg.connect(self._monitor_url(), connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1 FROM pgautofailover.node LIMIT 1")
            return True
        except psycopg.Error:
            return False

    def _tune_monitor(self) -> None:
        with psycopg.connect(self._monitor_url(), connect_timeout=3, autocommit=True) as conn:
            for name, value in FAST_HEALTH_CHECKS.items():
                conn.execute(f"ALTER SYSTEM SET pgautofailover.{name} = {value}")
            conn.execute("SELECT pg_reload_conf()")

    def _states(self) -> dict[str, str]:
        try:
            return {row["name"]: row["reported"] for row in self.state() if row["reported"] == row["goal"]}
        except psycopg.Error:
            return {}

    def _settled(self, count: int) -> bool:
        states = list(self._states().values())
        return (
            len(states) == count and states.count("primary") == 1 and states.count("secondary") == count - 1
        )

    def _checkpoint_primary(self) -> bool:
        with contextlib.suppress(psycopg.Error, FormationError):
            self.sql(self.primary(), "CHECKPOINT")
        return False

    def _writable(self, node: Node) -> bool:
        try:
            rows = self.sql(node, "SELECT pg_is_in_recovery()")
        except psycopg.Error:
            return False
        return rows == [(False,)]

    def _kill_group(self, node: Node) -> None:
        if node.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(node.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(10)

    def _wait(self, ready: Any, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            if ready():
                return
            for node in [self.monitor, *self.nodes]:
                if (
                    node.proc is not None
                    and node.proc.poll() is not None
                    and node.proc.returncode not in (0, -9)
                ):
                    raise FormationError(f"{node.name} exited {node.proc.returncode}:\n{node.tail()}")
            time.sleep(0.5)
        logs = "\n".join(f"--- {n.name}\n{n.tail()}" for n in [self.monitor, *self.nodes])
        raise FormationError(f"timed out waiting for {what}; state {self._states()}\n{logs}")
