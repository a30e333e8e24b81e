"""The ledger's load: wrk running ``holds_cycle.lua``, reserve -> settle per connection, and its samples.

wrk runs ``-t C -c C`` (one connection per thread, so each thread's Lua state can
carry the hold id from its reserve to its settle). The script times each request
itself and writes the samples to a file when wrk is done; this module turns them
into cycles/s, reserve and settle percentiles and errors by request and status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpu_use import CpuWindow, run_measured
from pgbench_tpcb import PgbenchRun

LUA = Path(__file__).resolve().parent / "holds_cycle.lua"
ACCOUNT_PREFIX, HOT_ACCOUNT = "bench-", "bench-hot"


def find_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk not found: apt-get install -y wrk", file=sys.stderr)
        install = ["apt-get", "install", "-y", "wrk"]
        if subprocess.run(install, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update"], capture_output=True)
            subprocess.run(install, capture_output=True)
        found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk not found: install it (Debian: apt-get install -y wrk)")
    return found


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list; NaN when empty."""
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass
class LoadRun:
    workload: str
    cycles: int
    duration_s: float
    cycles_per_s: float
    reserve_p50_ms: float
    reserve_p99_ms: float
    settle_p50_ms: float
    settle_p99_ms: float
    reserves_ok: int
    errors: dict[str, int]
    error_bodies: list[str]
    client_cpu_s: float
    wall_s: float
    server_s: float = 0.0
    server_main_s: float = 0.0
    postgres_s: float = 0.0
    machine_busy_s: float = 0.0
    machine_busy_pct: float = 0.0
    db_per_cycle: dict[str, float] = field(default_factory=dict)  # pg_stat_database counters per cycle
    pgbench: PgbenchRun | None = None
    profile: dict[str, Any] | None = field(default=None)
    paced: LoadRun | None = None  # the same workload held to half this run's cycles/s
    batches: int = 0  # group-commit batches the service ran in the window (its /metrics histogram)
    batched_operations: int = 0  # the operations those batches carried
    round: int = 1  # which of the invocation's --rounds this run belongs to

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def ratio(self) -> float:
        return self.cycles_per_s / self.pgbench.tps if self.pgbench and self.pgbench.tps else float("nan")


def run_wrk(
    wrk: str,
    base: str,
    workload: str,
    accounts: int,
    clients: int,
    duration: int,
    tag: str,
    token: str,
    cpu: CpuWindow | None,
    pace: float = 0.0,
) -> LoadRun:
    """Run one workload ("spread" or "one account") for `duration` s; `cpu` measures the window if given;
    `pace` > 0 holds each connection to that many cycles per second."""
    mode, target = ("one", HOT_ACCOUNT) if workload == "one account" else ("spread", ACCOUNT_PREFIX)
    with tempfile.NamedTemporaryFile("r", suffix=".samples", delete=False) as samples_file:
        samples_path = Path(samples_file.name)
    env = dict(os.environ, BENCH_SAMPLES=str(samples_path))
    argv = [wrk, "-t", str(clients), "-c", str(clients), "-d", f"{duration}s", "--timeout", "10s"]
    argv += ["-s", str(LUA), base, "--", mode, str(accounts), target, tag, token, f"{pace:.6f}"]
    try:
        if cpu:
            cpu.start()
        code, out, client_cpu, wall = run_measured(argv, env=env)
        if cpu:
            cpu.stop()
        if code != 0:
            raise RuntimeError(f"wrk failed ({code}): {out.strip()[-2000:]}")
        reserve: list[float] = []
        settle: list[float] = []
        statuses: Counter[str] = Counter()
        bodies: list[str] = []
        facts: dict[str, int] = {}
        for line in samples_path.read_text(errors="replace").splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "r":
                reserve.append(float(rest) / 1000.0)
            elif kind == "s":
                settle.append(float(rest) / 1000.0)
            elif kind == "status":
                key, count = rest.rsplit(" ", 1)
                statuses[key.replace(":", " ")] += int(count)
            elif kind == "body":
                bodies.append(rest)
            else:
                facts[kind] = int(rest)
    finally:
        samples_path.unlink(missing_ok=True)
    reserve.sort()
    settle.sort()
    errors = {k: v for k, v in statuses.items() if k not in ("reserve 201", "settle 200")}
    errors |= {k: v for k, v in facts.items() if k.startswith("socket_") and v}
    seconds = facts.get("duration_us", int(duration * 1e6)) / 1e6
    run = LoadRun(
        workload=workload,
        cycles=len(settle),
        duration_s=seconds,
        cycles_per_s=len(settle) / seconds if seconds else 0.0,
        reserve_p50_ms=percentile(reserve, 50),
        reserve_p99_ms=percentile(reserve, 99),
        settle_p50_ms=percentile(settle, 50),
        settle_p99_ms=percentile(settle, 99),
        reserves_ok=len(reserve),
        errors=errors,
        error_bodies=bodies[:5],
        client_cpu_s=client_cpu,
        wall_s=wall,
    )
    if cpu:
        run.server_s, run.server_main_s, run.postgres_s = cpu.server_s, cpu.server_main_s, cpu.postgres_s
        run.machine_busy_s, run.machine_busy_pct = cpu.machine_busy_s, cpu.machine_busy_pct
    return run
