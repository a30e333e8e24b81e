"""Operational gauges of unresolved holds, read from the database.

Set by the background jobs after each run and by `GET /metrics` at scrape time, so
the numbers are current wherever the jobs run (in-process or in `ledger worker`):
- `ledger_holds{state}` and `ledger_holds_oldest_age_seconds{state}` for open and
  interrupted holds;
- `ledger_amount_held{currency}`: the sum of unresolved holds' amounts;
- `ledger_reconciliation_lag_seconds`: how long the most overdue eligible hold has
  been eligible (0 when none is).

Prometheus samples are float64 by definition; the amounts are exported for
dashboards only and are computed exactly (numeric in SQL) before that conversion.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncEngine

from ledger.db import read_only
from ledger.metrics import AMOUNT_HELD, HOLDS_OLDEST_AGE, HOLDS_OPEN, RECONCILE_LAG
from ledger.reconciliation import repository

STATES = ("open", "interrupted")
_seen_currencies: set[str] = set()


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


def publish(gauges: HoldGauges) -> None:
    for state in STATES:
        HOLDS_OPEN.labels(state).set(gauges.counts.get(state, 0))
        HOLDS_OLDEST_AGE.labels(state).set(gauges.oldest_age_seconds.get(state, Decimal(0)))
    for currency in _seen_currencies - set(gauges.held):
        AMOUNT_HELD.labels(currency).set(0)
    for currency, amount in gauges.held.items():
        AMOUNT_HELD.labels(currency).set(amount)
        _seen_currencies.add(currency)
    RECONCILE_LAG.set(gauges.lag_seconds)


async def refresh(engine: AsyncEngine, *, grace: int) -> HoldGauges:
    gauges = await read(engine, grace=grace)
    publish(gauges)
    return gauges
