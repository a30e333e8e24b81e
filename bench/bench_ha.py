"""The replicated database measured: hold cycles on a synchronous pair beside one node, and failover times.

Run: ``.venv/bin/python bench/bench_ha.py [--duration 12] [--rounds 2] [--clients 16] [--json]``
(``make bench-ha``). Not part of ``make test``: it asserts nothing and its numbers depend on
the machine. Needs root (PostgreSQL runs as the ``postgres`` user), ``pg_autoctl``
(pg_auto_failover for PostgreSQL 15) and ``wrk``.

One invocation:

1. starts two pg_auto_failover formations on free loopback ports (``tests/formation.py``):
   *single*, a monitor and one node (state ``single``: no standby, nothing to wait for), and
   *pair*, a monitor and two nodes, the secondary in the replication quorum
   (``synchronous_standby_names = ANY 1 (...)``, ``synchronous_commit = on``: every commit
   waits until the secondary has flushed it); the same pg_autoctl defaults on every node;
2. starts ``ledger serve`` on each (on the pair with the formation's multi-host URL, as
   ``pg_autoctl show uri`` prints it), and funds ``--accounts`` accounts plus a hot one on each;
3. runs bench_holds.py's workloads (``wrk`` with ``holds_cycle.lua``: reserve -> settle per
   connection, "spread" and "one account") ``--rounds`` times, single and pair taking turns
   (single spread, pair spread, single one account, pair one account, ...), and reports each
   run's cycles/s, reserve and settle p50/p99 and errors, the CPU per cycle of the service and
   of the primary's PostgreSQL, and the medians per shape and workload;
4. failover, twice on the pair, with a probe reserving (and settling) through the service in a
   loop and another asking the secondary ``pg_is_in_recovery()`` every 50 ms: first with
   pg_auto_failover's default monitor settings, then (after the killed node has rejoined as
   the secondary) with tuned ones (``tests/formation.py``'s ``FAST_HEALTH_CHECKS``). Each time
   it SIGKILLs the primary's keeper and PostgreSQL (a machine that loses power) and reports:
   the promotion time (kill to the secondary answering as a primary), the service's time
   (kill to the first reserve answered 201 again), what the probe's requests got in between
   (by status), and the monitor's events;
5. checks ``GET /admin/v1/integrity`` on both services, stops everything, and writes the
   report to ``bench/results/ha-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from bench_holds import (
    ADMIN_TOKEN,
    GATEWAY_TOKEN,
    RESULTS,
    Service,
    code_version,
    create_accounts,
    run_counted,
)
from cpu_use import CpuWindow
from wrk_cycles import ACCOUNT_PREFIX, LoadRun, find_wrk, run_wrk

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.formation import FAST_HEALTH_CHECKS, Formation, Node  # noqa: E402

SHAPES = ("single", "pair")
WORKLOADS = ("spread", "one account")


@dataclass
class Shape:
    """One formation and the ledger serving on it."""

    name: str
    formation: Formation
    service: Service | None = None
    url: str = ""  # what the service was given as LEDGER_DATABASE_URL
    multi_host: bool = False  # the service runs on the formation's multi-host URL
    settings: dict[str, str] = field(default_factory=dict)  # the primary's replication settings


@dataclass
class Failover:
    """One hard failover: the kill, the promotion, the service's outage."""

    monitor_settings: str  # "default" or "tuned"
    settings: dict[str, str]
    killed: str
    promoted: str
    promoted_s: float  # kill -> the secondary answers pg_is_in_recovery() = false
    monitor_s: float  # kill -> the monitor's event of the secondary reporting wait_primary (or primary)
    service_s: float | None  # kill -> the first reserve answered 201 (None: no service on the URL)
    outage_statuses: dict[str, int]  # the probe's answers between the kill and that 201
    events: list[str]


def with_user(uri: str) -> str:
    """`pg_autoctl show uri` names no user (libpq would take the OS user's name): connect as postgres."""
    scheme, _, rest = uri.partition("://")
    return uri if "@" in rest.split("/", 1)[0] else f"{scheme}://postgres@{rest}"


def replication_settings(node: Node) -> dict[str, str]:
    with psycopg.connect(node.url, autocommit=True, connect_timeout=5) as conn:
        names = ("synchronous_standby_names", "synchronous_commit", "fsync", "shared_buffers")
        found = {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in names}  # type: ignore[index]
        rows = conn.execute("SELECT application_name, sync_state FROM pg_stat_replication").fetchall()
    found["standbys"] = ", ".join(f"{name} ({state})" for name, state in rows) or "none"
    return found


def monitor_sql(formation: Formation, statement: str) -> list[tuple[Any, ...]]:
    url = f"postgresql://postgres@127.0.0.1:{formation.monitor.port}/pg_auto_failover?sslmode=disable"
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(statement.encode())  # fixed statements of this file
        return cursor.fetchall() if cursor.description else []


def set_monitor(formation: Formation, tuned: bool) -> dict[str, str]:
    """The monitor's health-check settings: pg_auto_failover's defaults, or FAST_HEALTH_CHECKS."""
    for name, value in FAST_HEALTH_CHECKS.items():
        if tuned:
            monitor_sql(formation, f"ALTER SYSTEM SET pgautofailover.{name} = {value}")
        else:
            monitor_sql(formation, f"ALTER SYSTEM RESET pgautofailover.{name}")
    monitor_sql(formation, "SELECT pg_reload_conf()")
    time.sleep(1.0)  # the reload reaches the monitor's background worker
    return {
        name: str(monitor_sql(formation, f"SHOW pgautofailover.{name}")[0][0]) for name in FAST_HEALTH_CHECKS
    }


# ---- failover ---------------------------------------------------------------------------------


class ReserveProbe(threading.Thread):
    """Reserve (then settle) on one account in a loop; each request's (sent, answered, status)."""

    def __init__(self, base: str, tag: str) -> None:
        super().__init__(daemon=True)
        self.base, self.tag = base, tag
        self.samples: list[tuple[float, float, str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}
        body = {"account_id": f"{ACCOUNT_PREFIX}0000", "model": "gpt-5-mini", "max_output_tokens": 256}
        usage = {"usage": {"prompt_tokens": 1200, "completion_tokens": 180}}
        with httpx.Client(base_url=self.base, headers=headers, timeout=5) as http:
            n = 0
            while not self.halt.is_set():
                n += 1
                sent = time.monotonic()
                try:
                    r = http.post("/v1/holds", json=body | {"idempotency_key": f"{self.tag}-{n}"})
                    status = str(r.status_code)
                except httpx.HTTPError as error:
                    r, status = None, type(error).__name__
                self.samples.append((sent, time.monotonic(), status))
                if r is not None and r.status_code == 201:
                    with contextlib.suppress(httpx.HTTPError):
                        http.post(f"/v1/holds/{r.json()['id']}/settle", json=usage)
                else:
                    time.sleep(0.02)


def wait_promoted(node: Node, deadline: float) -> float | None:
    """Ask `node` every 50 ms whether it is out of recovery; the monotonic time it first was."""
    while time.monotonic() < deadline:
        with contextlib.suppress(psycopg.Error), psycopg.connect(node.url, connect_timeout=1) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            if row is not None and row[0] is False:
                return time.monotonic()
        time.sleep(0.05)
    return None


PROMOTED = ("wait_primary", "primary")


def _reported_primary(rows: list[tuple[Any, ...]], name: str) -> bool:
    return any(row[2] == name and row[3] in PROMOTED for row in rows)


def hard_failover(shape: Shape, tuned: bool, timeout: float) -> Failover:
    formation = shape.formation
    settings = set_monitor(formation, tuned)
    old = formation.primary()
    survivor = next(n for n in formation.nodes if n.name != old.name)
    probe = ReserveProbe(shape.service.base, f"fo-{int(time.time())}") if shape.service else None
    if probe:
        probe.start()
        time.sleep(2.0)  # the probe is answering before the kill
    event_floor = monitor_sql(formation, "SELECT coalesce(max(eventid), 0) FROM pgautofailover.event")[0][0]
    formation.kill_primary()  # returns once the keeper and PostgreSQL are SIGKILLed
    killed_at, killed_epoch = time.monotonic(), time.time()
    deadline = killed_at + timeout
    promoted_at = wait_promoted(survivor, deadline)
    service_s: float | None = None
    outage: Counter[str] = Counter()
    if probe:
        while time.monotonic() < deadline:
            back = [s for s in probe.samples if s[0] >= killed_at and s[2] == "201"]
            if back:
                service_s = back[0][1] - killed_at
                outage.update(s[2] for s in probe.samples if s[1] >= killed_at and s[1] < back[0][1])
                break
            time.sleep(0.05)
        probe.halt.set()
        probe.join(10)
    # The monitor records the survivor's report a moment after it has promoted itself: wait for it.
    query = (
        "SELECT extract(epoch FROM eventtime)::float8, to_char(eventtime, 'HH24:MI:SS.MS'), nodename, "
        "reportedstate::text, goalstate::text "
        f"FROM pgautofailover.event WHERE eventid > {int(event_floor)} ORDER BY eventid"
    )
    rows = monitor_sql(formation, query)
    while time.monotonic() < deadline and not _reported_primary(rows, survivor.name):
        time.sleep(0.2)
        rows = monitor_sql(formation, query)
    events = [f"{at} {name}: reported {reported}, goal {goal}" for _, at, name, reported, goal in rows]
    reported = [epoch for epoch, _, name, state, _ in rows if name == survivor.name and state in PROMOTED]
    return Failover(
        monitor_settings="tuned" if tuned else "default",
        settings=settings,
        killed=old.name,
        promoted=survivor.name,
        promoted_s=(promoted_at - killed_at) if promoted_at else float("nan"),
        monitor_s=(reported[0] - killed_epoch) if reported else float("nan"),
        service_s=service_s,
        outage_statuses=dict(outage),
        events=events,
    )


def rejoin(formation: Formation, node: Node, timeout: float) -> None:
    """Run the killed node's keeper again: it rejoins as the secondary (pg_rewind if it must)."""
    formation._spawn(node, ["run", "--pgdata", str(node.pgdata)])
    formation.wait_secondary(timeout=timeout)


# ---- throughput -------------------------------------------------------------------------------


def start_service(shape: Shape, url: str, log: Path) -> Service:
    service = Service(url, _free_port(), log)
    service.start()
    service.wait_ready(timeout=120)
    return service


def _free_port() -> int:
    from bench_holds import free_port

    return free_port()


def measure(shape: Shape, wrk: str, workload: str, args: argparse.Namespace, tag: str) -> LoadRun:
    assert shape.service is not None
    service = shape.service
    primary = shape.formation.primary()
    cpu = CpuWindow(service.pid, primary.postmaster_pid())
    load = (wrk, service.base, workload, args.accounts, args.clients, args.duration)
    return run_counted(*load, tag, GATEWAY_TOKEN, cpu)


def _median(values: list[float]) -> float:
    known = [v for v in values if v == v]
    return statistics.median(known) if known else float("nan")


def render(report: dict[str, Any], runs: list[tuple[str, int, LoadRun]], failovers: list[Failover]) -> str:
    p = report["params"]
    lines = [
        f"hold cycles (bench_holds.py's workloads), {p['clients']} connections, {p['duration']} s per run, "
        f"{p['rounds']} round(s), single and pair taking turns; code at {report['code']}",
    ]
    for name, shape in report["shapes"].items():
        lines.append(f"{name}: {shape['url']}  {shape['settings']}")
    lines += [
        "",
        f"{'shape':<7} {'workload':<12} {'#':>2} {'cycles/s':>9} {'reserve p50/p99':>16} "
        f"{'settle p50/p99':>15} {'errors':>6} {'ledger ms/cyc':>13} {'pg ms/cyc':>9} {'ops/batch':>9}",
    ]
    for shape, round_no, r in runs:
        cycles = r.cycles or float("nan")
        ops = r.batched_operations / r.batches if r.batches else float("nan")
        lines.append(
            f"{shape:<7} {r.workload:<12} {round_no:>2} {r.cycles_per_s:>9.1f} "
            f"{r.reserve_p50_ms:>7.1f} / {r.reserve_p99_ms:<6.1f} "
            f"{r.settle_p50_ms:>6.1f} / {r.settle_p99_ms:<6.1f} {r.error_count:>6} "
            f"{1000 * r.server_s / cycles:>13.2f} {1000 * r.postgres_s / cycles:>9.2f} {ops:>9.2f}"
        )
    lines += ["", "medians (each figure its own):"]
    for key, med in report["medians"].items():
        lines.append(
            f"  {key:<20} {med['cycles_per_s']:>8.1f} cycles/s, reserve p50/p99 "
            f"{med['reserve_p50_ms']:.1f} / {med['reserve_p99_ms']:.1f} ms, settle p50/p99 "
            f"{med['settle_p50_ms']:.1f} / {med['settle_p99_ms']:.1f} ms"
        )
    for key, ratio in report["pair_over_single"].items():
        lines.append(f"  pair / single, {key}: {ratio:.2f}")
    for f in failovers:
        service = (
            f"{f.service_s:.2f} s" if f.service_s is not None else "not measured (no service on the URL)"
        )
        lines += [
            "",
            f"failover, {f.monitor_settings} monitor settings {f.settings}:",
            f"  killed {f.killed}; {f.promoted} promoted after {f.promoted_s:.2f} s (the monitor recorded "
            f"it as {PROMOTED[0]} after {f.monitor_s:.2f} s); the service answered a reserve 201 again "
            f"after {service}",
            f"  the probe's answers in between: {f.outage_statuses or 'none'}",
        ]
        lines += [f"    {e}" for e in f.events]
    lines.append(f"integrity after the runs: {report['integrity']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=12, help="seconds per measured run (default 12)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four runs (default 2)")
    parser.add_argument("--clients", type=int, default=16, help="connections (default 16)")
    parser.add_argument("--accounts", type=int, default=1000, help="accounts for the spread workload")
    parser.add_argument("--warmup", type=int, default=3, help="seconds of unmeasured load per shape first")
    parser.add_argument("--failover-timeout", type=float, default=180, help="seconds to wait for a failover")
    parser.add_argument("--no-failover", action="store_true", help="measure the cycles only")
    parser.add_argument("--no-cycles", action="store_true", help="measure the failovers only")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    wrk = find_wrk()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="lbha", dir="/tmp"))
    shutil.chown(root, "postgres", "postgres")
    shapes = {
        "single": Shape("single", Formation(root / "single", nodes=1)),
        "pair": Shape("pair", Formation(root / "pair", nodes=2)),
    }
    if args.no_cycles:
        del shapes["single"]
    for shape in shapes.values():
        shape.formation.root.parent.mkdir(exist_ok=True)
        shutil.chown(shape.formation.root.parent, "postgres", "postgres")
    runs: list[tuple[str, int, LoadRun]] = []
    failovers: list[Failover] = []
    integrity: dict[str, Any] = {}
    notes: list[str] = []
    try:
        for shape in shapes.values():
            shape.formation.start()
            primary = shape.formation.primary()
            shape.settings = replication_settings(primary)
            log = RESULTS / f"ha-{stamp}-service-{shape.name}.log"
            shape.url = with_user(shape.formation.uri()) if shape.name == "pair" else primary.url
            try:
                shape.service = start_service(shape, shape.url, log)
                shape.multi_host = shape.name == "pair"
            except RuntimeError as error:
                notes.append(
                    f"the ledger did not start on {shape.url}: {str(error)[-300:]}; used {primary.url}"
                )
                shape.url = primary.url
                shape.service = start_service(shape, shape.url, log)
            asyncio.run(create_accounts(shape.service.base, args.accounts))
            with psycopg.connect(primary.url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            if not args.json:
                print(f"{shape.name}: ready on {shape.url}", file=sys.stderr)
        for shape in shapes.values() if not args.no_cycles else ():
            assert shape.service is not None
            for workload in WORKLOADS:
                warm = (wrk, shape.service.base, workload, args.accounts, args.clients, args.warmup)
                run_wrk(*warm, f"w{shape.name}{workload[0]}{stamp}", GATEWAY_TOKEN, None)
        for round_no in range(1, 0 if args.no_cycles else args.rounds + 1):
            for workload in WORKLOADS:
                for name in SHAPES:
                    tag = f"{name}{workload[0]}{round_no}-{stamp}"
                    runs.append((name, round_no, measure(shapes[name], wrk, workload, args, tag)))
                    if not args.json:
                        r = runs[-1][2]
                        print(
                            f"{name} {workload} #{round_no}: {r.cycles_per_s:.1f} cycles/s", file=sys.stderr
                        )
        if not args.no_failover:
            pair = shapes["pair"]
            if pair.service is not None and not pair.multi_host:
                notes.append(
                    "failover: the service was not on the multi-host URL, so only promotion is timed"
                )
                pair.service.stop()
                pair.service = None
            failovers.append(hard_failover(pair, tuned=False, timeout=args.failover_timeout))
            if not args.json:
                print(f"failover, default: {failovers[-1]}", file=sys.stderr)
            rejoin(pair.formation, pair.formation.node(failovers[-1].killed), args.failover_timeout)
            failovers.append(hard_failover(pair, tuned=True, timeout=args.failover_timeout))
            if not args.json:
                print(f"failover, tuned: {failovers[-1]}", file=sys.stderr)
        for shape in shapes.values():
            if shape.service is None:
                continue
            with contextlib.suppress(httpx.HTTPError, ValueError):
                check = httpx.get(
                    f"{shape.service.base}/admin/v1/integrity",
                    timeout=120,
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                )
                integrity[shape.name] = (
                    check.json().get("ok") if check.status_code == 200 else check.status_code
                )
    finally:
        for shape in shapes.values():
            if shape.service is not None:
                shape.service.stop()
            shape.formation.stop()
        shutil.rmtree(root, ignore_errors=True)

    medians: dict[str, dict[str, float]] = {}
    for name in SHAPES if runs else ():
        for workload in WORKLOADS:
            mine = [r for shape, _, r in runs if shape == name and r.workload == workload]
            medians[f"{name}, {workload}"] = {
                key: _median([getattr(r, key) for r in mine])
                for key in (
                    "cycles_per_s",
                    "reserve_p50_ms",
                    "reserve_p99_ms",
                    "settle_p50_ms",
                    "settle_p99_ms",
                )
            }
    ratios = {
        workload: medians[f"pair, {workload}"]["cycles_per_s"]
        / medians[f"single, {workload}"]["cycles_per_s"]
        for workload in WORKLOADS
        if runs and medians[f"single, {workload}"]["cycles_per_s"]
    }
    report: dict[str, Any] = {
        "timestamp": stamp,
        "code": code_version(),
        "nproc": os.cpu_count(),
        "params": vars(args),
        "shapes": {s.name: {"url": s.url, "settings": s.settings} for s in shapes.values()},
        "runs": [asdict(r) | {"shape": shape, "round": n} for shape, n, r in runs],
        "medians": medians,
        "pair_over_single": ratios,
        "failovers": [asdict(f) for f in failovers],
        "integrity": integrity,
        "notes": notes,
    }
    out = RESULTS / f"ha-{stamp}.json"
    text = json.dumps(report, indent=2, default=str)
    out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    else:
        print(render(report, runs, failovers))
        for note in notes:
            print(f"note: {note}")
        print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("interrupted: services and formations stopped", file=sys.stderr)
        raise SystemExit(130) from None
