"""A throwaway PostgreSQL cluster of its own, run as the `postgres` user, on a free loopback port.

For the tests (and the HA bench) that need what the shared server must never be given:
their own `postgresql.conf` (WAL archiving), a restart, a restore into a fresh data
directory. Everything lives in one temporary folder owned by `postgres`; `Workspace.close()`
stops every cluster made in it and deletes the folder. Needs root (to act as
`postgres` through `runuser`) and the PostgreSQL server binaries.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.serving import free_port

SERVICE_USER = "postgres"


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL server's bin folder (Debian layout), else the one on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def missing_prerequisites(*tools: str) -> list[str]:
    """What this machine lacks to run a cluster of its own (and the named extra tools)."""
    missing: list[str] = []
    if os.geteuid() != 0:
        missing.append("root (to run PostgreSQL as the postgres user)")
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        missing.append(f"a {SERVICE_USER!r} user")
    if postgres_bin() is None:
        missing.append("the PostgreSQL server binaries (initdb, pg_ctl)")
    if shutil.which("runuser") is None:
        missing.append("runuser")
    missing += [tool for tool in tools if shutil.which(tool) is None]
    return missing


def as_postgres(
    argv: list[str], *, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run `argv` as the postgres user, with the server binaries first on PATH."""
    bin_dir = postgres_bin()
    path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    full = ["runuser", "-u", SERVICE_USER, "--", "env", f"PATH={path}", *argv]
    done = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


class Workspace:
    """A temporary folder owned by postgres (mode 0700), for data directories, repositories, logs."""

    def __init__(self, prefix: str = "ldc") -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: sockets live in it
        entry = pwd.getpwnam(SERVICE_USER)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.clusters: list[Cluster] = []

    def cluster(self, name: str) -> Cluster:
        """A cluster whose data directory will be `name` in this folder (empty, owned by postgres)."""
        made = Cluster(self.folder(name), free_port())
        self.clusters.append(made)
        return made

    def folder(self, name: str) -> Path:
        path = self.root / name
        as_postgres(["mkdir", "-p", str(path)])
        return path

    def close(self) -> None:
        for cluster in self.clusters:
            cluster.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Cluster:
    """One PostgreSQL server: its data directory, port, and Unix socket folder (its data directory)."""

    datadir: Path
    port: int

    @classmethod
    def initdb(cls, workspace: Workspace, name: str, settings: dict[str, str] | None = None) -> Cluster:
        """A new cluster (trust authentication on loopback, data checksums on), with `settings`
        appended to its postgresql.conf."""
        cluster = workspace.cluster(name)
        as_postgres(
            ["initdb", "-D", str(cluster.datadir), "-U", "postgres", "-A", "trust", "-k", "--no-sync"]
        )
        cluster.configure(settings or {})
        return cluster

    def configure(self, settings: dict[str, str]) -> None:
        lines = [f"{key} = {value}" for key, value in settings.items()]
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/pgcluster.py\n" + "\n".join(lines) + "\n")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1"
        log = self.datadir.parent / f"{self.datadir.name}.log"
        as_postgres(
            ["pg_ctl", "-D", str(self.datadir), "-l", str(log), "-o", options, "-w", "-t", "120", "start"]
        )

    def wait_writable(self, timeout: float = 120) -> None:
        """Until the server accepts connections and is out of recovery (a restore's replay is done)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2) as conn:
                    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                    if row is not None and row[0] is False:
                        return
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.datadir} did not become writable:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if (self.datadir / "postmaster.pid").exists():
            as_postgres(["pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "stop"], check=False)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """One statement in autocommit; its rows (none for a statement that returns none)."""
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []

    def log_tail(self, lines: int = 30) -> str:
        log = self.datadir.parent / f"{self.datadir.name}.log"
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
