"""Ledger-level figures for GET /metrics, read from the database: the same from every process.

The journal, the reconciliation runs and the alert outbox are the record of what the
ledger did, whichever process did it (an API replica's reserve, a `ledger worker`'s
reconcile, an embedded job). So these families are not counted in memory: each scrape
reads them from the database (`read`) and renders them (`Figures.text`), and any process
that is scraped (API, worker host, any replica) answers the same numbers for one
committed state. Behind several replicas aggregate with `max`, never `sum`.

Invariants:
- Money never becomes a float: amounts are summed as `numeric` in SQL, kept as
  `Decimal` and written into the exposition text with `format(amount, "f")` (as
  `ledger.metrics.AmountHeld` does). Counts are integers.
- Every family is a sum over append-only or never-deleted rows (journal transactions
  and entries, reconciliation runs, alert deliveries), so the counters only grow. The
  journal's totals are kept incrementally per process (`ledger.figures.journal`), so a
  read costs what was written since the last reads, not the size of the journal.
  `ledger_alert_events` is a gauge (an event moves from pending to a final state).
- One read is one REPEATABLE READ transaction: the families agree with each other.
- `FigureCache` answers a scrape from the last read while it is younger than
  LEDGER_METRICS_CACHE_SECONDS, and concurrent scrapes of one process share one read, so
  a scrape storm costs the database at most one read per process per period. Cost: see
  docs/monitoring.md.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.figures.journal import JournalTally, Totals

_RUNS = text(
    """
    SELECT status, count(*) AS n, coalesce(sum(jsonb_array_length(errors)), 0) AS errors
      FROM reconciliation_runs GROUP BY status
    """
)
_RECONCILED = text(
    """
    SELECT c.key AS currency,
           sum((c.value->>'settled')::bigint) AS settled,
           sum((c.value->>'released')::bigint) AS released,
           sum((c.value->>'charged_amount')::numeric) AS charged_amount,
           sum((c.value->>'released_amount')::numeric) AS released_amount
      FROM reconciliation_runs r CROSS JOIN LATERAL jsonb_each(r.by_currency) c
     GROUP BY c.key
    """
)
_ALERT_EVENTS = text("SELECT status, count(*) AS n FROM alert_events GROUP BY status")
_ALERT_ATTEMPTS = text("SELECT delivered, count(*) AS n FROM alert_deliveries GROUP BY delivered")

ALERT_STATUSES = ("pending", "delivered", "failed", "cancelled")
RUN_STATUSES = ("running", "succeeded", "failed")


@dataclass(frozen=True)
class Figures:
    """One consistent read of the ledger-level families (see the module)."""

    journal_counts: dict[str, int] = field(default_factory=dict)
    journal_amounts: dict[tuple[str, str], Decimal] = field(default_factory=dict)  # (kind, currency)
    revenue: dict[str, Decimal] = field(default_factory=dict)
    grants_expired: dict[str, tuple[int, Decimal]] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    run_errors: int = 0
    reconciled: dict[str, tuple[int, int, Decimal, Decimal]] = field(default_factory=dict)
    alert_events: dict[str, int] = field(default_factory=dict)
    alert_attempts: dict[str, int] = field(default_factory=dict)  # delivered / failed

    def text(self) -> bytes:
        out = _Exposition()
        out.family("ledger_journal_transactions_total", "counter", "Journal transactions recorded, by kind")
        for kind, n in sorted(self.journal_counts.items()):
            out.sample("ledger_journal_transactions_total", {"kind": kind}, n)
        out.family(
            "ledger_journal_amount_total",
            "counter",
            "Gross amount of journal transactions (the sum of their positive entries), by kind and currency",
        )
        for (kind, currency), amount in sorted(self.journal_amounts.items()):
            out.sample("ledger_journal_amount_total", {"kind": kind, "currency": currency}, amount)
        out.family("ledger_revenue_total", "counter", "Net amount credited to revenue, by currency")
        for currency, amount in sorted(self.revenue.items()):
            out.sample("ledger_revenue_total", {"currency": currency}, amount)
        out.family("ledger_grants_expired_total", "counter", "Credit grants expired, by currency")
        out.family(
            "ledger_grants_expired_amount_total", "counter", "Remainders of expired grants, by currency"
        )
        for currency, (n, amount) in sorted(self.grants_expired.items()):
            out.sample("ledger_grants_expired_total", {"currency": currency}, n)
            out.sample("ledger_grants_expired_amount_total", {"currency": currency}, amount)
        out.family("ledger_reconciliation_runs_total", "counter", "Reconciliation passes recorded, by status")
        for status in RUN_STATUSES:
            out.sample("ledger_reconciliation_runs_total", {"status": status}, self.runs.get(status, 0))
        out.family(
            "ledger_reconciliation_errors_total",
            "counter",
            "Holds a reconciliation pass could not resolve (listed in its run's errors)",
        )
        out.sample("ledger_reconciliation_errors_total", {}, self.run_errors)
        out.family(
            "ledger_reconciled_holds_total",
            "counter",
            "Holds resolved by the reconciler, by currency and action",
        )
        out.family(
            "ledger_reconciled_amount_total",
            "counter",
            "Money moved by the reconciler, by currency and action (charged; released back to accounts)",
        )
        for currency, (settled, released, charged, returned) in sorted(self.reconciled.items()):
            resolved = "ledger_reconciled_holds_total"
            out.sample(resolved, {"currency": currency, "action": "settled"}, settled)
            out.sample(resolved, {"currency": currency, "action": "released"}, released)
            moved = "ledger_reconciled_amount_total"
            out.sample(moved, {"currency": currency, "action": "charged"}, charged)
            out.sample(moved, {"currency": currency, "action": "released"}, returned)
        out.family("ledger_alert_events", "gauge", "Low-balance alert events, by status")
        for status in ALERT_STATUSES:
            out.sample("ledger_alert_events", {"status": status}, self.alert_events.get(status, 0))
        out.family(
            "ledger_alert_deliveries_total",
            "counter",
            "Low-balance alert delivery attempts, by outcome (delivered, failed)",
        )
        for outcome in ("delivered", "failed"):
            attempts = self.alert_attempts.get(outcome, 0)
            out.sample("ledger_alert_deliveries_total", {"outcome": outcome}, attempts)
        return out.bytes()


class _Exposition:
    """Prometheus text format 0.0.4, written by hand so amounts stay exact decimals."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self._lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, labels: dict[str, str], value: int | Decimal) -> None:
        rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        number = str(value) if isinstance(value, int) else format(value, "f")
        self._lines.append(f"{name}{{{rendered}}} {number}" if rendered else f"{name} {number}")

    def bytes(self) -> bytes:
        return ("\n".join(self._lines) + "\n").encode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _journal(totals: Totals) -> dict[str, Any]:
    counts: dict[str, int] = {}
    revenue: dict[str, Decimal] = {}
    expired: dict[str, tuple[int, Decimal]] = {}
    for (kind, currency), t in totals.items():
        counts[kind] = counts.get(kind, 0) + t.transactions
        if t.revenue:
            revenue[currency] = revenue.get(currency, Decimal(0)) + t.revenue
        if kind == "grant_expiry":
            expired[currency] = (t.transactions, t.gross)
    return {
        "journal_counts": counts,
        "journal_amounts": {key: t.gross for key, t in totals.items()},
        "revenue": revenue,
        "grants_expired": expired,
    }


async def read(conn: AsyncConnection, tally: JournalTally) -> Figures:
    """Every family from one snapshot (the caller's transaction; see `read_figures`)."""
    journal = _journal(await tally.read(conn))
    runs = list(await conn.execute(_RUNS))
    reconciled = {
        r.currency: (int(r.settled), int(r.released), Decimal(r.charged_amount), Decimal(r.released_amount))
        for r in await conn.execute(_RECONCILED)
    }
    events = {r.status: int(r.n) for r in await conn.execute(_ALERT_EVENTS)}
    attempts = {
        ("delivered" if r.delivered else "failed"): int(r.n) for r in await conn.execute(_ALERT_ATTEMPTS)
    }
    return Figures(
        **journal,
        runs={r.status: int(r.n) for r in runs},
        run_errors=sum(int(r.errors) for r in runs),
        reconciled=reconciled,
        alert_events=events,
        alert_attempts=attempts,
    )


async def read_figures(engine: AsyncEngine, tally: JournalTally | None = None) -> Figures:
    """One read in one REPEATABLE READ snapshot; `tally` keeps the journal's totals between reads."""
    async with engine.connect() as conn:
        await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        try:
            return await read(conn, tally if tally is not None else JournalTally())
        finally:
            await conn.rollback()


class FigureCache:
    """The last read, reused for `ttl` seconds; concurrent scrapes wait on one read.

    `ttl` 0 reads at every scrape. A failed read raises (the caller decides); the
    previous figures stay for the next scrape to try again.
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._figures: Figures | None = None
        self._read_at = -math.inf  # monotonic seconds of the last read: never yet
        self._lock: asyncio.Lock | None = None
        self.tally = JournalTally()
        self.reads = 0

    async def get(self, engine: AsyncEngine) -> Figures:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._figures is None or time.monotonic() - self._read_at >= self.ttl:
                self._figures = await read_figures(engine, self.tally)
                self._read_at = time.monotonic()
                self.reads += 1
            return self._figures
