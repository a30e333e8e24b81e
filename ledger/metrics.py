"""Prometheus metrics, rendered at GET /metrics; correct with one serving process or several.

- One process (`ledger serve`): one registry, with the standard process and platform
  collectors.
- Several (`ledger serve --workers N`): prometheus_client's multiprocess mode.
  `ledger serve` sets PROMETHEUS_MULTIPROC_DIR to a fresh folder before the worker
  processes start (so before any of them imports prometheus_client: the value class
  is chosen at import), counters and histograms are summed over every process, and
  a scrape answered by any worker gives the same totals. Each worker marks itself
  dead on shutdown. The `process_*` families are reported for every live worker,
  read from /proc, with a `pid` label.
- Gauges read from the database at scrape time (holds, lag, integrity) use
  `multiprocess_mode="mostrecent"`: the scrape that just refreshed them wins.
  `ledger_integrity_ok` is created at the first check result, so it is absent (not
  a false 0) until an integrity check has run.
- Job outcomes come from the `job_runs` table (see `JobRunsCollector`), so the jobs
  that ran in `ledger worker` processes are exported by the API, exactly once per
  recorded run, however many processes serve.
- Ledger-level figures (journal transactions and amounts by kind, revenue, reconciliations,
  expired grants, alert deliveries) are read from the database at scrape time
  (`ledger.figures`, kept here as text in `FIGURES`): the same from every process.
  What stays per process: HTTP requests and latency, batch sizes, the fast lane, auth
  failures, job events, `ledger_process_journal_transactions_total` (this process's writes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from prometheus_client import (
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "ledger_http_requests_total",
    "HTTP requests by route and status",
    ["method", "route", "status"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "ledger_http_request_duration_seconds",
    "HTTP request latency by route",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
# Per process: what this process wrote. The ledger-wide `ledger_journal_transactions_total`
# (every process's writes, the reconciler's included) is read from the journal (ledger.figures).
MONEY_MOVEMENTS = Counter(
    "ledger_process_journal_transactions",
    "Journal transactions written by this process, by kind (ledger-wide: ledger_journal_transactions_total)",
    ["kind"],
    registry=REGISTRY,
)
HOLD_BATCH_SIZE = Histogram(
    "ledger_hold_batch_operations",
    "Gateway hold operations (reserve, settle, release) per group-commit batch (one database transaction)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    registry=REGISTRY,
)
FAST_LANE = Counter(
    "ledger_fast_lane_requests_total",
    "Gateway reserve/settle/release requests served ahead of the framework, or handed to it",
    ["route", "outcome"],
    registry=REGISTRY,
)
AUTH_FAILURES = Counter(
    "ledger_auth_failures_total",
    "Failed authentications (401 on a bearer token or a console login) by surface",
    ["surface"],
    registry=REGISTRY,
)
AUTH_THROTTLED = Counter(
    "ledger_auth_throttled_total",
    "Authentication attempts refused with 429 (too many failures from the address) by surface",
    ["surface"],
    registry=REGISTRY,
)
OVERAGE_FLAGGED = Counter(
    "ledger_overage_flagged_total",
    "Settles charged above LEDGER_MAX_OVERAGE_FACTOR x the hold (recorded, flagged, account marked)",
    ["currency"],
    registry=REGISTRY,
)
BUDGET_ALERTS = Counter(
    "ledger_budget_alerts_total",
    "Settles that took a budget key's period spend to its alert threshold (once per key and period)",
    ["period"],
    registry=REGISTRY,
)
DATABASE_SYNC_STANDBY = Gauge(
    "ledger_database_sync_standby",
    "1 when the primary has a synchronous standby (an answered commit is on two machines), else 0; "
    "read every second by each serving process (ledger.replication)",
    registry=REGISTRY,
    multiprocess_mode="mostrecent",
)
HOLDS_OPEN = Gauge(
    "ledger_holds", "Unresolved holds by state", ["state"], registry=REGISTRY, multiprocess_mode="mostrecent"
)
HOLDS_OLDEST_AGE = Gauge(
    "ledger_holds_oldest_age_seconds",
    "Age of the oldest unresolved hold by state",
    ["state"],
    registry=REGISTRY,
    multiprocess_mode="mostrecent",
)


class AmountHeld:
    """`ledger_amount_held{currency}`: money, so never a float. prometheus_client stores and
    renders every sample as float64; this family is instead kept as Decimal and written
    into the exposition text exactly (`render`), from the database read of this scrape."""

    NAME = "ledger_amount_held"
    HELP = "Total amount held by unresolved holds, by currency"

    def __init__(self) -> None:
        self._held: dict[str, Decimal] = {}

    def set(self, currency: str, amount: Decimal) -> None:
        self._held[currency] = amount

    def get(self, currency: str) -> Decimal | None:
        return self._held.get(currency)

    def text(self) -> bytes:
        lines = [f"# HELP {self.NAME} {self.HELP}", f"# TYPE {self.NAME} gauge"]
        for currency, amount in sorted(self._held.items()):
            lines.append(f'{self.NAME}{{currency="{currency}"}} {format(amount, "f")}')
        return ("\n".join(lines) + "\n").encode()


AMOUNT_HELD = AmountHeld()


class FiguresText:
    """The ledger-level families (`ledger.figures`) of the last scrape, as exact exposition text."""

    def __init__(self) -> None:
        self._text = b""

    def set(self, rendered: bytes) -> None:
        self._text = rendered

    def text(self) -> bytes:
        return self._text


FIGURES = FiguresText()
RECONCILE_LAG = Gauge(
    "ledger_reconciliation_lag_seconds",
    "How long the most overdue hold has been eligible for reconciliation",
    registry=REGISTRY,
    multiprocess_mode="mostrecent",
)
# In-process events of the scheduler and job runners (the runs themselves: JobRunsCollector).
JOB_EVENTS = Counter(
    "ledger_job_events_total",
    "Job ticks that did not run, by job and event (skipped: still running elsewhere; enqueue_failed)",
    ["job", "event"],
    registry=REGISTRY,
)

_integrity_lock = threading.Lock()
_integrity: tuple[Gauge, Gauge] | None = None


def set_integrity(ok: bool, checked_at: float) -> None:
    """Record an integrity check result; creates `ledger_integrity_ok` on the first one."""
    global _integrity
    with _integrity_lock:
        if _integrity is None:
            _integrity = (
                Gauge(
                    "ledger_integrity_ok",
                    "1 when the last integrity check passed, 0 when it failed (absent before the first)",
                    registry=REGISTRY,
                    multiprocess_mode="mostrecent",
                ),
                Gauge(
                    "ledger_integrity_checked_timestamp_seconds",
                    "When integrity was last checked",
                    registry=REGISTRY,
                    multiprocess_mode="mostrecent",
                ),
            )
        _integrity[0].set(1 if ok else 0)
        _integrity[1].set(checked_at)


def integrity_value() -> float | None:
    """The last integrity result this process recorded (None before the first)."""
    return None if _integrity is None else float(_integrity[0]._value.get())


@dataclass(frozen=True)
class JobTotal:
    job: str
    ok: bool
    runs: int
    seconds: Decimal


class JobRunsCollector:
    """`ledger_job_runs_total{job,outcome}` and `ledger_job_duration_seconds_total{job}` from job_runs.

    The totals are read from the database at scrape time (`update`) and yielded as they
    are: every recorded run counts once, whichever process (API, `ledger worker`,
    embedded) ran it. Behind several API replicas each reports the same totals: use
    `max by (job, outcome)`, not `sum`.
    """

    def __init__(self) -> None:
        self._totals: tuple[JobTotal, ...] = ()

    def update(self, totals: list[JobTotal]) -> None:
        self._totals = tuple(totals)

    def collect(self) -> Iterator[Metric]:
        runs = CounterMetricFamily(
            "ledger_job_runs", "Recorded background job runs by job and outcome", labels=["job", "outcome"]
        )
        seconds = CounterMetricFamily(
            "ledger_job_duration_seconds", "Time spent in recorded job runs, by job", labels=["job"]
        )
        spent: dict[str, Decimal] = {}
        for total in self._totals:
            runs.add_metric([total.job, "ok" if total.ok else "failed"], total.runs)
            spent[total.job] = spent.get(total.job, Decimal(0)) + total.seconds
        for job, value in sorted(spent.items()):
            seconds.add_metric([job], float(value))  # a Prometheus sample is float64: export only
        yield runs
        yield seconds


JOB_RUNS = JobRunsCollector()
REGISTRY.register(JOB_RUNS)
if multiprocess_dir() is None:
    ProcessCollector(registry=REGISTRY)
    PlatformCollector(registry=REGISTRY)


class WorkerProcessesCollector:
    """The standard `process_*` families for every live serving process, labelled `pid`.

    The pids are those that wrote metric files into the multiprocess folder; a process
    that has exited (no /proc entry) is left out.
    """

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.folder.glob("*.db"):
            tail = path.stem.rsplit("_", 1)[-1]
            if tail.isdigit() and Path(f"/proc/{tail}").exists():
                found.add(int(tail))
        return sorted(found)

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for pid in self.pids():
            reader = ProcessCollector(registry=None, pid=_constant(pid))
            for family in reader.collect():
                target = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for sample in family.samples:
                    target.add_sample(sample.name, {**sample.labels, "pid": str(pid)}, sample.value)
        yield from merged.values()


def _constant(pid: int) -> Callable[[], int]:
    return lambda: pid


def render() -> bytes:
    folder = multiprocess_dir()
    if folder is None:
        return generate_latest(REGISTRY) + AMOUNT_HELD.text() + FIGURES.text()
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    registry.register(JOB_RUNS)
    registry.register(WorkerProcessesCollector(folder))
    registry.register(PLATFORM_COLLECTOR)
    return generate_latest(registry) + AMOUNT_HELD.text() + FIGURES.text()


def mark_process_dead() -> None:
    """On a serving process's exit in multiprocess mode: drop its live gauge files."""
    folder = multiprocess_dir()
    if folder is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid(), folder)  # type: ignore[no-untyped-call]
