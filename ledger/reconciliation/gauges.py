"""Operational gauges of unresolved holds, read from the database.

Set by the background jobs after each run and by `GET /metrics` at scrape time, so
the numbers are current wherever the jobs run (in-process or in `ledger worker`);
at scrape time `ledger_integrity_ok` comes from the last recorded integrity job (absent
while none is recorded) and the job run totals from `job_runs`:
- `ledger_holds{state}` and `ledger_holds_oldest_age_seconds{state}` for open and
  interrupted holds;
- `ledger_amount_held{currency}`: the sum of unresolved holds' amounts;
- `ledger_reconciliation_lag_seconds`: how long the most overdue eligible hold has
  been eligible (0 when none is);
- at scrape time only, the ledger-level figures of `ledger.figures` (journal, revenue,
  reconciliations, grants, alerts), through a per-engine `FigureCache`: one read per
  process per LEDGER_METRICS_CACHE_SECONDS however often it is scraped.

Prometheus samples are float64 by definition; the amounts are exported for
dashboards only and are computed exactly (numeric in SQL) before that conversion.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from decimal import Decimal

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from ledger.db import read_only
from ledger.errors import DatabaseUnavailable
from ledger.figures import FigureCache
from ledger.jobs import repository as job_runs
from ledger.metrics import (
    AMOUNT_HELD,
    FIGURES,
    HOLDS_OLDEST_AGE,
    HOLDS_OPEN,
    JOB_RUNS,
    RECONCILE_LAG,
    JobTotal,
    set_integrity,
)
from ledger.reconciliation import repository

log = structlog.get_logger(__name__)

STATES = ("open", "interrupted")
_seen_currencies: set[str] = set()
_caches: weakref.WeakKeyDictionary[AsyncEngine, FigureCache] = weakref.WeakKeyDictionary()


def figure_cache(engine: AsyncEngine, ttl: float) -> FigureCache:
    """The engine's cache (one per serving process and engine, so one per event loop)."""
    cache = _caches.get(engine)
    if cache is None or cache.ttl != ttl:
        cache = _caches[engine] = FigureCache(ttl)
    return cache


@dataclass(frozen=True)
class HoldGauges:
    counts: dict[str, int]
    oldest_age_seconds: dict[str, Decimal]
    held: dict[str, Decimal]
    lag_seconds: Decimal


async def read(engine: AsyncEngine, *, grace: int) -> HoldGauges:
    async with read_only(engine) as conn:
        by_state = await repository.holds_by_state(conn)
        held = await repository.held_by_currency(conn)
        lag = await repository.lag_seconds(conn, grace=grace)
    return HoldGauges(
        counts={r.state: int(r.n) for r in by_state},
        oldest_age_seconds={r.state: Decimal(r.oldest_age) for r in by_state},
        held={r.currency.strip(): Decimal(r.held) for r in held},
        lag_seconds=max(Decimal(lag), Decimal(0)),
    )


def _sample(value: Decimal) -> float:
    """Seconds as a Prometheus sample (float64): export only, never money (see AmountHeld)."""
    return float(value)


def publish(gauges: HoldGauges) -> None:
    for state in STATES:
        HOLDS_OPEN.labels(state).set(gauges.counts.get(state, 0))
        HOLDS_OLDEST_AGE.labels(state).set(_sample(gauges.oldest_age_seconds.get(state, Decimal(0))))
    for currency in _seen_currencies - set(gauges.held):
        AMOUNT_HELD.set(currency, Decimal(0))
    for currency, amount in gauges.held.items():
        AMOUNT_HELD.set(currency, amount)  # exact: money never becomes a float
        _seen_currencies.add(currency)
    RECONCILE_LAG.set(_sample(gauges.lag_seconds))


async def refresh_for_scrape(engine: AsyncEngine, *, grace: int, cache_seconds: float = 1.0) -> None:
    """Before GET /metrics renders: the hold gauges, the ledger-level figures, and
    `ledger_integrity_ok` from the last recorded integrity job (which may have run in
    another process). Never fails the scrape."""
    try:
        await refresh(engine, grace=grace)
        FIGURES.set((await figure_cache(engine, cache_seconds).get(engine)).text())
        async with read_only(engine) as conn:
            last = await job_runs.latest(conn, "check_integrity")
            totals = await job_runs.totals(conn)
        if last is not None:
            set_integrity(bool(last.ok), last.finished_at.timestamp())
        JOB_RUNS.update(
            [JobTotal(job=r.job, ok=bool(r.ok), runs=int(r.runs), seconds=Decimal(r.seconds)) for r in totals]
        )
    except DatabaseUnavailable:
        log.warning("metrics.gauges_stale", why="the database cannot be reached")


async def refresh(engine: AsyncEngine, *, grace: int) -> HoldGauges:
    gauges = await read(engine, grace=grace)
    publish(gauges)
    return gauges
