"""Throughput of the hold lifecycle over HTTP (reserve then settle), next to pgbench on the same server.

Run: ``.venv/bin/python bench/bench_holds.py [--duration 20] [--clients 16] [--accounts 1000] [--json]``
(``make bench``); ``--profile`` also records the service with py-spy (``bench/profile_holds.sh``).
Not part of ``make test``: it asserts nothing and its numbers depend on the machine.

One invocation:

1. creates a fresh database ``ledger_bench_<random>`` (and ``..._pgbench``) on the local PostgreSQL
   (``--server-url``), starts ``ledger serve`` against it on a free port, waits for ``/readyz``,
   and through the admin API creates ``--accounts`` funded accounts plus one "hot" account;
2. runs two workloads of reserve -> settle cycles with ``wrk`` (C, light; Lua script
   ``holds_cycle.lua``), one connection per thread, ``--clients`` of them, each for ``--duration`` s
   after a ``--warmup``: "spread" picks a random account per cycle, "one account" puts every cycle
   on the hot account (each reserve and settle locks that one account row);
3. runs pgbench's TPC-B-like script on the same server with the same client count and duration:
   scale 10 (10 branch rows) beside "spread", scale 1 (one branch row that every transaction
   updates, so one hot row like the one account) beside "one account";
4. prints cycles/s, reserve and settle p50/p99, errors by status, pgbench tps, the ratio
   cycles/s / tps, and CPU seconds used during each run by the load client, the ledger server
   process and PostgreSQL (all of its processes, including other users of the shared server),
   with the machine's busy share; appends the same as JSON to ``bench/results/``;
   with ``--rounds N`` (``make bench``: 3), steps 2-3 and the half-peak runs N times, the workloads
   taking turns, and the medians per workload;
5. stops the service and drops both databases, also on Ctrl-C or an error.

A cycle is one 201 reserve followed by one 200 settle on a connection; anything else is an error
and is counted by request and status, with the first few bodies shown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import profile_summary
from cpu_use import CpuWindow, child_pids, process_tree
from pgbench_tpcb import (
    PgbenchRun,
    activity_per,
    admin_sql,
    db_activity,
    find_pgbench,
    find_postmaster,
    run_pgbench,
    with_database,
)
from wrk_cycles import ACCOUNT_PREFIX, HOT_ACCOUNT, LoadRun, find_wrk, run_wrk

RESULTS = Path(__file__).resolve().parent / "results"
VENV_BIN = Path(sys.executable).parent
# `ledger serve` with a database refuses tokens shorter than 32 characters.
ADMIN_TOKEN, GATEWAY_TOKEN = "bench-admin-token-5d0c8a2e6f1b9374", "bench-gateway-token-1e9b4f7a3c0d8265"
SPREAD_DEPOSIT, HOT_DEPOSIT = "100000", "10000000"
# --plan: every account on this plan (10% off the bench model's list rates; an override on another)
PLAN = {
    "plan_id": "bench-plan",
    "currency": "USD",
    "document": {"adjust_percent": "-10", "models": {"gpt-5": {"rates": {"input": "1", "output": "8"}}}},
    "reason": "bench",
}
PGBENCH_SCALE = {"spread": 10, "one account": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Service:
    """``ledger serve`` as a subprocess; under ``py-spy record`` as its child when `profile_to` is set."""

    db_url: str
    port: int
    log_path: Path
    profile_to: Path | None = None
    workers: int | None = None  # LEDGER_WEB_WORKERS; None leaves the service's default
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None  # the Python process that serves (the child when py-spy launches it)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = dict(os.environ)
        env.update(
            LEDGER_DATABASE_URL=self.db_url,
            LEDGER_GATEWAY_TOKENS=GATEWAY_TOKEN,
            LEDGER_ADMIN_TOKENS=f"{ADMIN_TOKEN}:admin",
            LEDGER_IDENTITY_SECRET="bench-identity-secret-7a2c9e4b0d1f6835",
            LEDGER_LOG_LEVEL="warning",
        )
        if self.workers is not None:
            env["LEDGER_WEB_WORKERS"] = str(self.workers)
        argv = [str(VENV_BIN / "ledger"), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        if self.profile_to is not None:
            argv = [*pyspy_record_args(self.profile_to), "--", sys.executable, *argv]
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 90.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited ({self.proc.returncode}):\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    if self.profile_to is not None:
                        kids = child_pids(self.proc.pid)
                        self.pid = kids[0] if kids else None
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the service was not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        target = self.pid if self.pid and self.pid != self.proc.pid else self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def create_accounts(
    base: str,
    accounts: int,
    concurrency: int = 16,
    budget_key: str | None = None,
    grant: bool = False,
    plan: bool = False,
) -> float:
    """Create and fund `accounts` spread accounts and the hot one through the admin API, with a
    budget for `budget_key` and a live grant on the hot one if asked, and every account on the
    price plan `PLAN` if `plan`; seconds taken."""
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30, limits=limits) as client:

        async def one(account_id: str, amount: str) -> None:
            async with gate:
                made = await client.post(
                    "/admin/v1/accounts", json={"account_id": account_id, "currency": "USD"}
                )
                if made.status_code not in (200, 201):
                    raise RuntimeError(f"create {account_id}: {made.status_code} {made.text[:300]}")
                paid = await client.post(
                    f"/admin/v1/accounts/{account_id}/deposits",
                    json={"idempotency_key": f"fund-{account_id}", "amount": amount},
                )
                if paid.status_code not in (200, 201):
                    raise RuntimeError(f"deposit {account_id}: {paid.status_code} {paid.text[:300]}")
                if plan:
                    put = await client.put(
                        f"/admin/v1/accounts/{account_id}/plan",
                        json={"plan_id": PLAN["plan_id"], "reason": "bench"},
                    )
                    if put.status_code != 200:
                        raise RuntimeError(f"plan {account_id}: {put.status_code} {put.text[:300]}")

        if plan:
            made = await client.post("/admin/v1/plans", json=PLAN)
            if made.status_code not in (200, 201):
                raise RuntimeError(f"plan: {made.status_code} {made.text[:300]}")

        jobs = [one(f"{ACCOUNT_PREFIX}{i:04d}", SPREAD_DEPOSIT) for i in range(accounts)]
        await asyncio.gather(*jobs, one(HOT_ACCOUNT, HOT_DEPOSIT))
        if budget_key is not None:
            budget = {"amount": "1000000000", "period": "monthly", "reason": "bench"}
            put = await client.put(f"/admin/v1/accounts/{HOT_ACCOUNT}/budgets/{budget_key}", json=budget)
            if put.status_code != 200:
                raise RuntimeError(f"budget {budget_key}: {put.status_code} {put.text[:300]}")
        if grant:
            body = {
                "idempotency_key": "bench-grant",
                "amount": "1000000",
                "expires_at": "2100-01-01T00:00:00Z",
                "reason": "bench",
            }
            made = await client.post(f"/admin/v1/accounts/{HOT_ACCOUNT}/grants", json=body)
            if made.status_code not in (200, 201):
                raise RuntimeError(f"grant: {made.status_code} {made.text[:300]}")
    return time.monotonic() - started


def batch_counts(base: str) -> tuple[int, int]:
    """(batches, operations) so far: the service's `ledger_hold_batch_operations` histogram."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    count = total = 0.0
    for line in text.splitlines():
        if line.startswith("ledger_hold_batch_operations_count"):
            count = float(line.split()[-1])
        elif line.startswith("ledger_hold_batch_operations_sum"):
            total = float(line.split()[-1])
    return int(count), int(total)


def run_counted(*wrk_args: Any) -> LoadRun:
    """`run_wrk(*wrk_args)`, with the batches the service (at `wrk_args[1]`) ran meanwhile."""
    base = wrk_args[1]
    batches, operations = batch_counts(base)
    run = run_wrk(*wrk_args)
    after = batch_counts(base)
    run.batches, run.batched_operations = after[0] - batches, after[1] - operations
    return run


def find_pyspy() -> str:
    candidate = VENV_BIN / "py-spy"
    if not candidate.exists() and not shutil.which("py-spy"):
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "py-spy"], check=True)
    return str(candidate) if candidate.exists() else str(shutil.which("py-spy"))


def pyspy_record_args(out: Path) -> list[str]:
    # --idle --threads: a wall-clock picture per thread (waiting included); --function: one frame a function
    pyspy = find_pyspy()
    return [
        pyspy,
        "record",
        "--idle",
        "--threads",
        "--subprocesses",
        "--function",
        "--rate",
        "100",
        "--format",
        "raw",
        "-o",
        str(out),
    ]


def can_attach() -> bool:
    """Whether py-spy may attach to a running process here (ptrace allowed)."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "sleeper.py"
        script.write_text("import time\ntime.sleep(30)\n")
        sleeper = subprocess.Popen([sys.executable, str(script)])
        try:
            time.sleep(1.0)
            probe = subprocess.run([find_pyspy(), "dump", "--pid", str(sleeper.pid)], capture_output=True)
            return probe.returncode == 0
        finally:
            sleeper.kill()
            sleeper.wait()


def summarize_profile(path: Path, title: str) -> dict[str, Any]:
    stacks = profile_summary.read_stacks(path, "MainThread")
    summary = profile_summary.hottest(stacks, 10)
    svg = path.with_suffix(".svg")
    svg.write_text(profile_summary.flame_svg(stacks, title + " (event loop thread)"), encoding="utf-8")
    text = profile_summary.format_summary(summary)
    return {"collapsed": str(path), "svg": str(svg), "text": text} | asdict(summary)


# ---- report -------------------------------------------------------------------------------------


def _ms(a: float, b: float) -> str:
    return f"{a:.1f} / {b:.1f}"


def _activity(counts: dict[str, float]) -> str:
    names = {
        "xact_commit": "commits",
        "xact_rollback": "rollbacks",
        "tup_returned": "rows scanned",
        "tup_fetched": "rows fetched",
        "tup_inserted": "inserted",
        "tup_updated": "updated",
    }
    return ", ".join(f"{names.get(k, k)} {v:g}" for k, v in counts.items())


def _cpu_row(name: str, r: LoadRun | PgbenchRun) -> str:
    """One row of the CPU table: a wrk or pgbench run's window, by process."""
    other = r.machine_busy_s - r.client_cpu_s - r.server_s - r.postgres_s
    return (
        f"{name:<30} {r.wall_s:>6.1f} {r.client_cpu_s:>7.2f} {r.server_s:>7.2f} {r.postgres_s:>8.2f} "
        f"{other:>6.2f} {r.machine_busy_s:>7.2f} {r.machine_busy_pct:>6.1f}"
    )


def _per_cycle(name: str, r: LoadRun, g: PgbenchRun | None) -> str:
    """CPU per cycle by process, the group-commit batches, and pgbench's CPU per transaction beside."""
    per = (lambda seconds: 1000 * seconds / r.cycles) if r.cycles else (lambda seconds: float("nan"))
    loop = 100 * r.server_main_s / r.wall_s if r.wall_s else float("nan")
    line = f"{name}: {r.cycles} cycles; CPU per cycle: ledger server {per(r.server_s):.2f} ms"
    line += f" (event loop thread busy {loop:.0f}% of wall), postgres {per(r.postgres_s):.2f} ms"
    line += f", client (wrk) {per(r.client_cpu_s):.2f} ms"
    if r.batches:
        line += f"; {r.batches / r.wall_s:.0f} batches/s of {r.batched_operations / r.batches:.2f} operations"
    if g and g.transactions:
        line += f"; pgbench: postgres {1000 * g.postgres_s / g.transactions:.2f} ms CPU/txn"
        line += f", latency avg {g.latency_avg_ms:.1f} ms"
    return line


def _median(values: list[float]) -> float:
    known = [v for v in values if v == v]  # NaN (no pgbench, no samples) left out
    return statistics.median(known) if known else float("nan")


def medians(runs: list[LoadRun]) -> dict[str, dict[str, float]]:
    """Per workload, the median over its rounds of each headline figure (and how many rounds)."""
    out: dict[str, dict[str, float]] = {}
    for workload in dict.fromkeys(r.workload for r in runs):
        mine = [r for r in runs if r.workload == workload]
        half = [r.paced for r in mine if r.paced is not None]
        figures: dict[str, list[float]] = {
            "cycles_per_s": [r.cycles_per_s for r in mine],
            "reserve_p50_ms": [r.reserve_p50_ms for r in mine],
            "reserve_p99_ms": [r.reserve_p99_ms for r in mine],
            "settle_p50_ms": [r.settle_p50_ms for r in mine],
            "settle_p99_ms": [r.settle_p99_ms for r in mine],
            "pgbench_tps": [r.pgbench.tps if r.pgbench else float("nan") for r in mine],
            "ratio": [r.ratio for r in mine],
            "half_cycles_per_s": [h.cycles_per_s for h in half],
            "half_reserve_p50_ms": [h.reserve_p50_ms for h in half],
            "half_reserve_p99_ms": [h.reserve_p99_ms for h in half],
            "half_settle_p50_ms": [h.settle_p50_ms for h in half],
            "half_settle_p99_ms": [h.settle_p99_ms for h in half],
        }
        out[workload] = {name: _median(values) for name, values in figures.items()}
        out[workload]["rounds"] = len(mine)
        out[workload]["errors"] = sum(r.error_count + (r.paced.error_count if r.paced else 0) for r in mine)
    return out


def _which(r: LoadRun, rounds: int) -> str:
    """The run's round, as the report names it (nothing when there is one round)."""
    return f" #{r.round}" if rounds > 1 else ""


def _label(r: LoadRun, rounds: int) -> str:
    return r.workload + _which(r, rounds)


def render(report: dict[str, Any], runs: list[LoadRun]) -> str:
    m, p = report["machine"], report["params"]
    rounds = p["rounds"]
    lines = [
        f"hold cycles (reserve {p['model']} max_output_tokens={p['max_output_tokens']} -> settle "
        f"{p['usage']}), {p['clients']} connections, {p['duration']} s each after {p['warmup']} s warm-up;",
        f"pgbench TPC-B-like, -c {p['clients']} -j {min(2, p['clients'])} -T {p['duration']} -M prepared, "
        "scale 10 beside spread, scale 1 (one branch row) beside one account;",
        f"service: {report['service']['processes']} process(es), code at {report['service']['code']}"
        + (f"; {rounds} rounds, the workloads interleaved (#n: the round)" if rounds > 1 else ""),
        "",
        f"{'workload':<15} {'cycles/s':>9} {'reserve p50/p99 ms':>19} {'settle p50/p99 ms':>18} "
        f"{'errors':>6} {'pgbench tps':>16} {'ratio':>6} {'client CPU %':>12}",
    ]
    for r in runs:
        pg = f"{r.pgbench.tps:.1f} (s={r.pgbench.scale})" if r.pgbench else "-"
        lines.append(
            f"{_label(r, rounds):<15} {r.cycles_per_s:>9.1f} {_ms(r.reserve_p50_ms, r.reserve_p99_ms):>19} "
            f"{_ms(r.settle_p50_ms, r.settle_p99_ms):>18} {r.error_count:>6} {pg:>16} {r.ratio:>6.2f} "
            f"{100 * r.client_cpu_s / r.wall_s:>12.1f}"
        )
    paced = [r for r in runs if r.paced is not None]
    if paced:
        lines += [
            "",
            "held to half the peak (each connection paced to half the cycles/s measured above; pgbench",
            "held to half its tps with -R, its latency counted from each transaction's scheduled start):",
            f"{'workload':<15} {'cycles/s':>9} {'reserve p50/p99 ms':>19} {'settle p50/p99 ms':>18} "
            f"{'errors':>6} {'pgbench tps':>16} {'latency avg ms':>14}",
        ]
        for r in paced:
            h = r.paced
            assert h is not None
            g = r.pgbench.paced if r.pgbench else None
            pg = f"{g.tps:.1f} (s={g.scale})" if g else "-"
            lines.append(
                f"{_label(r, rounds):<15} {h.cycles_per_s:>9.1f} "
                f"{_ms(h.reserve_p50_ms, h.reserve_p99_ms):>19} {_ms(h.settle_p50_ms, h.settle_p99_ms):>18} "
                f"{h.error_count:>6} {pg:>16} {g.latency_avg_ms if g else float('nan'):>14.1f}"
            )
    if rounds > 1:
        lines += [
            "",
            f"medians over the {rounds} rounds (each figure's own median; errors: the sum of all runs):",
            f"{'workload':<15} {'cycles/s':>9} {'reserve p50/p99 ms':>19} {'ratio':>6} "
            f"{'half: cycles/s':>14} {'reserve p50/p99 ms':>19} {'errors':>6}",
        ]
        for workload, med in report["medians"].items():
            lines.append(
                f"{workload:<15} {med['cycles_per_s']:>9.1f} "
                f"{_ms(med['reserve_p50_ms'], med['reserve_p99_ms']):>19} {med['ratio']:>6.2f} "
                f"{med['half_cycles_per_s']:>14.1f} "
                f"{_ms(med['half_reserve_p50_ms'], med['half_reserve_p99_ms']):>19} {int(med['errors']):>6}"
            )
    lines += [
        "",
        f"CPU seconds used in each run (core-seconds; nproc {m['nproc']}, so at most {m['nproc']} x wall).",
        "postgres: every process of the shared server; other: the rest of the machine",
        "(other processes, and kernel networking time that no process is billed for)",
        f"{'run':<30} {'wall s':>6} {'client':>7} {'ledger':>7} {'postgres':>8} {'other':>6} "
        f"{'machine':>7} {'busy %':>6}",
    ]
    for r in runs:
        for label, load in (("", r), (", half", r.paced)):
            if load is not None:
                lines.append(_cpu_row(f"ledger {_label(r, rounds)}{label}", load))
        for label, g in (("", r.pgbench), (", half", r.pgbench.paced if r.pgbench else None)):
            if g is not None:
                lines.append(_cpu_row(f"pgbench -s {g.scale}{_which(r, rounds)}{label}", g))
    lines.append("")
    for r in runs:
        lines.append(_per_cycle(_label(r, rounds), r, r.pgbench))
        if r.db_per_cycle:
            lines.append("  per cycle (pg_stat_database, approx.): " + _activity(r.db_per_cycle))
        if r.pgbench and r.pgbench.per_txn:
            lines.append("  per pgbench transaction:              " + _activity(r.pgbench.per_txn))
        for load in (r, r.paced):
            if load is not None and load.errors:
                lines.append(f"  errors{'' if load is r else ' (half the peak)'}: {dict(load.errors)}")
                lines += [f"  {body}" for body in load.error_bodies]
        if r.paced is not None:
            half_pg = r.pgbench.paced if r.pgbench else None
            lines.append(_per_cycle(f"{_label(r, rounds)}, half the peak", r.paced, half_pg))
    lines.append(
        f"setup: {report['setup']['accounts']} accounts in {report['setup']['seconds']:.1f} s; "
        f"integrity after the runs: {report['integrity']}"
    )
    soak = report.get("soak")
    if soak:
        rss = soak["rss_kib"]
        peak = max(x["rss_kib"] for x in rss) / 1024
        lines.append(
            f"soak: spread for {soak['seconds']} s, {soak['cycles']} cycles ({soak['cycles_per_s']:.1f}/s), "
            f"{soak['errors']} errors; service RSS {rss[0]['rss_kib'] / 1024:.1f} MiB at start, "
            f"{rss[-1]['rss_kib'] / 1024:.1f} MiB at the end, max {peak:.1f} MiB"
            f" (after the warm-ups and measured runs)"
        )
    for r in runs:
        if r.profile:
            lines += ["", f"profile of the ledger server, {r.workload} ({r.profile['svg']}):"]
            lines += r.profile["text"].splitlines()
    return "\n".join(lines)


def code_version() -> str:
    """The commit the service runs, and whether ledger/ or pricing/ have uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    with contextlib.suppress(OSError):
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "ledger", "pricing"],
            capture_output=True,
            text=True,
        )
        if head.returncode == 0:
            return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")
    return "?"


def tool_version(argv: list[str]) -> str:
    with contextlib.suppress(OSError):
        done = subprocess.run(argv, capture_output=True, text=True)
        return (done.stdout or done.stderr).strip().splitlines()[0]
    return "?"


# ---- main ---------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    """Resident memory of the service's process tree (VmRSS summed), KiB."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def run_soak(wrk: str, base: str, pid: int, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    """Spread cycles for --soak seconds in windows of 30 s; the service's RSS before and after each."""
    window = min(30, args.soak)
    samples = [{"at_s": 0, "rss_kib": rss_kib(pid)}]
    cycles = 0
    errors = 0
    started = time.monotonic()
    while time.monotonic() - started < args.soak - 1:
        part = run_wrk(
            wrk,
            base,
            "spread",
            args.accounts,
            args.clients,
            window,
            f"{tag}{len(samples)}",
            GATEWAY_TOKEN,
            None,
        )
        cycles += part.cycles
        errors += part.error_count
        samples.append({"at_s": round(time.monotonic() - started), "rss_kib": rss_kib(pid)})
        if not args.json:
            print(
                f"soak: {samples[-1]['at_s']} s, {cycles} cycles, RSS {samples[-1]['rss_kib']} KiB",
                file=sys.stderr,
            )
    wall = time.monotonic() - started
    return {
        "seconds": round(wall),
        "cycles": cycles,
        "cycles_per_s": cycles / wall,
        "errors": errors,
        "rss_kib": samples,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=20, help="seconds per measured run (default 20)")
    parser.add_argument(
        "--clients", type=int, default=16, help="connections, and pgbench clients (default 16)"
    )
    parser.add_argument("--accounts", type=int, default=1000, help="accounts for the spread workload")
    parser.add_argument(
        "--warmup", type=int, default=5, help="seconds of unmeasured load before each workload"
    )
    parser.add_argument(
        "--server-url",
        default=os.environ.get("BENCH_SERVER_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--profile", action="store_true", help="record the service with py-spy during each workload"
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="service processes (LEDGER_WEB_WORKERS; default: its own)"
    )
    parser.add_argument("--no-pgbench", action="store_true", help="skip pgbench (no ratio)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each workload this many times, interleaved, and report the medians (make bench: 3)",
    )
    parser.add_argument(
        "--no-half-peak",
        action="store_true",
        help="skip the run of each workload held to half its measured cycles/s (latency at half the peak)",
    )
    parser.add_argument(
        "--soak",
        type=int,
        default=0,
        help="then run spread for this many seconds, sampling the service's RSS (make bench: 300)",
    )
    parser.add_argument(
        "--grant",
        action="store_true",
        help="the hot account also has a large live grant, so every settle on it is paid by the grant",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="every account carries a price plan (10%% off list, an override on another model): "
        "reserves and settles price with its materialised rates",
    )
    parser.add_argument(
        "--budget-key",
        default=None,
        help="every reserve names this budget key (the hot account's has a budget that never refuses)",
    )
    return parser.parse_args(argv)


def _no_nan(value: Any) -> Any:
    """NaN (a percentile of no samples, a ratio without pgbench) as null, so the file is strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_nan(v) for v in value]
    return value


@dataclass
class Rig:
    """What every measured run of one invocation uses."""

    args: argparse.Namespace
    wrk: str
    pgbench: str | None
    service: Service
    postmaster: int | None
    db: str  # the ledger's scratch database
    pg_db: str  # pgbench's
    suffix: str  # makes the idempotency keys of this invocation unique
    stamp: str
    attach: bool  # py-spy can attach to the running service (--profile)


def measure_workload(rig: Rig, workload: str, round_no: int) -> LoadRun:
    """One round of one workload: the full run, the run held to half its peak, pgbench beside both.
    The warm-up and the py-spy recording (--profile) are the first round's only."""
    args, wrk, pgbench, service, postmaster = rig.args, rig.wrk, rig.pgbench, rig.service, rig.postmaster
    db, pg_db, suffix, stamp = rig.db, rig.pg_db, rig.suffix, rig.stamp
    tag = f"{workload.split()[0]}{round_no}-{suffix}"
    if args.warmup > 0 and round_no == 1:
        warm = (wrk, service.base, workload, args.accounts, args.clients, args.warmup, f"w{tag}")
        run_wrk(*warm, GATEWAY_TOKEN, None)
    recorder: subprocess.Popen[bytes] | None = None
    profile_path = RESULTS / f"holds-{stamp}-profile-{workload.replace(' ', '-')}.txt"
    if rig.attach and service.pid and round_no == 1:
        recorder = subprocess.Popen(
            [*pyspy_record_args(profile_path), "--pid", str(service.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
    try:
        cpu = CpuWindow(service.pid, postmaster)
        before = db_activity(args.server_url, db)
        load = (wrk, service.base, workload, args.accounts, args.clients, args.duration)
        run = run_counted(*load, tag, GATEWAY_TOKEN, cpu)
        run.round = round_no
        run.db_per_cycle = activity_per(before, db_activity(args.server_url, db), run.cycles)
    finally:
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                recorder.wait(timeout=60)
    if recorder is not None and profile_path.exists():
        run.profile = summarize_profile(profile_path, f"ledger server, {workload}, {stamp}")
    if not args.no_half_peak and run.cycles_per_s > 0:
        pace = run.cycles_per_s / 2 / args.clients  # per connection
        half = CpuWindow(service.pid, postmaster)
        run.paced = run_counted(*load, f"h{tag}", GATEWAY_TOKEN, half, pace)
        run.paced.round = round_no
    if pgbench:
        bench_args = (pgbench, args.server_url, pg_db, PGBENCH_SCALE[workload], args.clients)
        run.pgbench = run_pgbench(*bench_args, args.duration, CpuWindow(service.pid, postmaster))
        if not args.no_half_peak and run.pgbench.tps > 0:
            # The same tables held to half the tps just measured: its latency and CPU per
            # transaction at half its peak, beside the ledger's at half its own.
            half_pg = CpuWindow(service.pid, postmaster)
            rate = run.pgbench.tps / 2
            run.pgbench.paced = run_pgbench(*bench_args, args.duration, half_pg, rate=rate, init=False)
    return run


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: the finally below stops and drops


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where a shell started us ignoring it
    wrk = find_wrk()
    pgbench = None if args.no_pgbench else find_pgbench()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = secrets.token_hex(4)
    db, pg_db = f"ledger_bench_{suffix}", f"ledger_bench_{suffix}_pgbench"
    attach = args.profile and can_attach()
    whole_profile = RESULTS / f"holds-{stamp}-profile-all.txt" if args.profile and not attach else None
    service = Service(
        with_database(args.server_url, db),
        free_port(),
        RESULTS / f"holds-{stamp}-service.log",
        profile_to=whole_profile,
        workers=args.workers,
    )
    created: list[str] = []
    runs: list[LoadRun] = []
    integrity: Any = "not checked"
    soak: dict[str, Any] | None = None
    setup_s = float("nan")
    processes = 0
    try:
        for name in (db, pg_db):
            admin_sql(args.server_url, f'CREATE DATABASE "{name}"')
            created.append(name)
        postmaster = find_postmaster(args.server_url)
        service.start()
        service.wait_ready()
        if args.budget_key is not None:
            os.environ["BENCH_BUDGET_KEY"] = args.budget_key  # read by holds_cycle.lua (wrk's environment)
        made = create_accounts(
            service.base, args.accounts, budget_key=args.budget_key, grant=args.grant, plan=args.plan
        )
        setup_s = asyncio.run(made)
        # As pgbench -i does after loading: vacuum and analyze the freshly loaded tables, so the
        # first workload does not run beside autovacuum and autoanalyze of the setup.
        admin_sql(with_database(args.server_url, db), "VACUUM ANALYZE")
        processes = len(process_tree(service.pid)) if service.pid else 0
        if not args.json:
            print(
                f"setup: {args.accounts} + 1 accounts funded in {setup_s:.1f} s; measuring ...",
                file=sys.stderr,
            )
        # Rounds interleave the workloads (spread, one account, spread, ...), so each workload's
        # runs are spread over the whole invocation and its medians over the machine's phases.
        rig = Rig(args, wrk, pgbench, service, postmaster, db, pg_db, suffix, stamp, attach)
        for round_no in range(1, args.rounds + 1):
            for workload in ("spread", "one account"):
                runs.append(measure_workload(rig, workload, round_no))
        if args.soak > 0 and service.pid:
            soak = run_soak(wrk, service.base, service.pid, args, f"soak-{suffix}")
        with contextlib.suppress(httpx.HTTPError):
            check = httpx.get(
                f"{service.base}/admin/v1/integrity",
                timeout=120,
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            )
            integrity = check.json().get("ok") if check.status_code == 200 else f"HTTP {check.status_code}"
    finally:
        service.stop()
        for name in created:
            try:
                admin_sql(args.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as error:  # keep dropping the others; say what is left behind
                print(f"could not drop database {name}: {error}", file=sys.stderr)

    report: dict[str, Any] = {
        "timestamp": stamp,
        "machine": {
            "nproc": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "wrk": tool_version([wrk, "--version"]),
            "pgbench": tool_version([pgbench, "--version"]) if pgbench else None,
        },
        "params": {
            "duration": args.duration,
            "clients": args.clients,
            "accounts": args.accounts,
            "warmup": args.warmup,
            "model": "gpt-5-mini",
            "max_output_tokens": 256,
            "usage": {"prompt_tokens": 1200, "completion_tokens": 180},
            "pgbench_scale": PGBENCH_SCALE,
            "profile": args.profile,
            "workers": args.workers,
            "rounds": args.rounds,
            "budget_key": args.budget_key,
            "grant": args.grant,
            "plan": args.plan,
        },
        "setup": {"accounts": args.accounts + 1, "seconds": round(setup_s, 2)},
        "integrity": integrity,
        "soak": soak,
        "service": {
            "processes": processes,
            "code": code_version(),
            "lanes": os.environ.get("LEDGER_BATCH_LANES"),
            "pipeline": os.environ.get("LEDGER_BATCH_PIPELINE"),
        },
        "medians": medians(runs),
        "workloads": [
            asdict(r)
            | {
                "ratio": r.ratio,
                "error_count": r.error_count,
                "client_cpu_pct": 100 * r.client_cpu_s / r.wall_s,
            }
            for r in runs
        ],
    }
    if whole_profile is not None and whole_profile.exists():
        report["profile_all"] = summarize_profile(whole_profile, f"ledger server, whole run, {stamp}")
    out = RESULTS / f"holds-{stamp}.json"
    text = json.dumps(_no_nan(report), indent=2, default=str)
    out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    else:
        print(render(report, runs))
        if "profile_all" in report:
            print("\nprofile of the ledger server, whole run (py-spy could not attach, so it launched it):")
            print(report["profile_all"]["text"])
        print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("interrupted: service stopped, bench databases dropped", file=sys.stderr)
        raise SystemExit(130) from None
