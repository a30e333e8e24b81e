"""pgbench's TPC-B-like transaction on the same server, as the yardstick for the ledger's cycles.

``pgbench -i -s SCALE`` fills a scratch database (SCALE branch rows, 10 tellers and
100,000 accounts per branch); ``pgbench -c C -j 2 -T D -M prepared`` then runs the
built-in script (update an account, read it, update a teller and a branch, insert a
history row) from C clients for D seconds. Every transaction updates one of SCALE
branch rows, so scale 1 is one hot row, as a ledger account that every cycle locks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from cpu_use import CpuWindow, run_measured


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def admin_sql(url: str, statement: str) -> Any:
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        cur = conn.execute(statement.encode())  # a trusted, fixed statement: no parameters
        return cur.fetchone() if cur.description else None


ACTIVITY = ("xact_commit", "xact_rollback", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated")


def db_activity(url: str, db: str) -> dict[str, int]:
    """The database's cumulative counters from pg_stat_database (transactions and rows).

    Backends report them at most once a second while busy, so a difference over a window
    that starts right after the same load (the warm-up) is close, not exact.
    """
    row = admin_sql(url, f"SELECT {', '.join(ACTIVITY)} FROM pg_stat_database WHERE datname = '{db}'")
    return dict(zip(ACTIVITY, (int(v) for v in row), strict=True)) if row else {}


def activity_per(before: dict[str, int], after: dict[str, int], count: int) -> dict[str, float]:
    if not count:
        return {}
    return {k: round((after.get(k, 0) - v) / count, 2) for k, v in before.items()}


def find_postmaster(url: str) -> int | None:
    """The server's postmaster pid (from postmaster.pid in its data directory), if this machine runs it."""
    try:
        (data_dir,) = admin_sql(url, "SHOW data_directory")
        return int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
    except Exception:
        return None


def find_pgbench() -> str:
    for candidate in (shutil.which("pgbench"), "/usr/bin/pgbench", "/usr/lib/postgresql/15/bin/pgbench"):
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit("pgbench not found (Debian: apt-get install -y postgresql-client)")


def pgbench_args(url: str) -> tuple[list[str], dict[str, str]]:
    parts = urlsplit(url)
    args = [
        "-h",
        parts.hostname or "127.0.0.1",
        "-p",
        str(parts.port or 5432),
        "-U",
        parts.username or "postgres",
    ]
    env = dict(os.environ)
    if parts.password:
        env["PGPASSWORD"] = parts.password
    return args, env


@dataclass
class PgbenchRun:
    scale: int
    tps: float
    latency_avg_ms: float
    transactions: int
    client_cpu_s: float
    wall_s: float
    server_s: float = 0.0
    postgres_s: float = 0.0
    machine_busy_s: float = 0.0
    machine_busy_pct: float = 0.0
    per_txn: dict[str, float] = field(default_factory=dict)  # pg_stat_database counters per transaction
    rate: float = 0.0  # -R: transactions per second offered in all (0: as fast as it goes)
    paced: PgbenchRun | None = None  # the same again held to half this run's tps


def run_pgbench(
    pgbench: str,
    url: str,
    db: str,
    scale: int,
    clients: int,
    duration: int,
    cpu: CpuWindow,
    rate: float = 0.0,
    init: bool = True,
) -> PgbenchRun:
    """TPC-B-like for `duration` s; `rate` > 0 holds all clients together to that many tps (-R);
    `init` False reuses the tables of the previous run on `db` (same scale)."""
    conn, env = pgbench_args(url)
    if init:
        made = subprocess.run(
            [pgbench, *conn, "-i", "-q", "-s", str(scale), db], capture_output=True, text=True, env=env
        )
        if made.returncode != 0:
            raise RuntimeError(f"pgbench -i failed: {made.stderr.strip()}")
    argv = [
        pgbench,
        *conn,
        "-c",
        str(clients),
        "-j",
        str(min(2, clients)),
        "-T",
        str(duration),
        "-M",
        "prepared",
    ]
    if rate > 0:
        argv += ["-R", f"{rate:.1f}"]
    before = db_activity(url, db)
    cpu.start()
    code, out, client_cpu, wall = run_measured([*argv, db], env=env)
    cpu.stop()
    after = db_activity(url, db)
    if code != 0:
        raise RuntimeError(f"pgbench failed ({code}): {out.strip()[-2000:]}")
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    latency = re.search(r"latency average = ([\d.]+) ms", out)
    processed = re.search(r"number of transactions actually processed: (\d+)", out)
    if not tps:
        raise RuntimeError(f"no tps in pgbench output: {out[-2000:]}")
    return PgbenchRun(
        scale=scale,
        tps=float(tps.group(1)),
        latency_avg_ms=float(latency.group(1)) if latency else float("nan"),
        transactions=int(processed.group(1)) if processed else 0,
        client_cpu_s=client_cpu,
        wall_s=wall,
        server_s=cpu.server_s,
        postgres_s=cpu.postgres_s,
        machine_busy_s=cpu.machine_busy_s,
        machine_busy_pct=cpu.machine_busy_pct,
        per_txn=activity_per(before, after, int(processed.group(1)) if processed else 0),
        rate=rate,
    )
