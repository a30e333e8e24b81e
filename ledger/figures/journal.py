"""The journal's totals for /metrics, kept incrementally: a scrape reads only recent rows.

A full aggregate of the journal costs time in proportion to the journal's size
(docs/monitoring.md). `JournalTally` instead keeps, per process, exact
totals of every journal transaction up to a *frontier* id, and at each read aggregates
only the rows above it, found by the primary key (journal_transactions.id and
journal_entries' (transaction_id, id) key): the cost follows the traffic since the
previous reads, not the size of the journal. The first read of a process reads it all.

Why the frontier is safe. Identity ids are handed out before commit, so a transaction
still in flight may hold an id below ids that are already visible. Each read records
its snapshot's `xmax` N (every transaction that had an id by then has an xid below N,
because every writer of the journal locks an account row, which assigns its xid, before
it inserts) and the highest visible id M. Once a later snapshot's `xmin` is at or past N,
every transaction below N has ended, so no row with an id ≤ M can still appear: the
frontier moves to M and the rows up to it are added to the kept totals for good.
Visible rows above the frontier are aggregated anew at every read (the *tail*) and added
to the kept totals in the answer, never kept. Rows are append-only (the database refuses
updates and deletes), so every total only grows.

Amounts are `numeric` in SQL and `Decimal` here: exact, never a float.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_SNAPSHOT = text(
    """
    SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric AS xmin,
           pg_snapshot_xmax(pg_current_snapshot())::text::numeric AS xmax,
           (SELECT max(id) FROM journal_transactions) AS max_id
    """
)
# Per kind and currency, for the transactions with lo < id <= hi: how many, the gross
# (their positive entries), the revenue (the revenue shards' entries).
_RANGE = text(
    """
    SELECT t.kind, e.currency, count(DISTINCT t.id) AS n,
           coalesce(sum(e.amount) FILTER (WHERE e.amount > 0), 0) AS gross,
           coalesce(sum(e.amount) FILTER (WHERE e.account_id LIKE 'system:revenue:%'), 0) AS revenue
      FROM journal_transactions t
      JOIN journal_entries e ON e.transaction_id = t.id
                            AND e.transaction_id > :lo AND e.transaction_id <= :hi
     WHERE t.id > :lo AND t.id <= :hi
     GROUP BY t.kind, e.currency
    """
)


@dataclass
class KindTotals:
    transactions: int = 0
    gross: Decimal = Decimal(0)
    revenue: Decimal = Decimal(0)

    def plus(self, other: KindTotals) -> KindTotals:
        return KindTotals(
            self.transactions + other.transactions, self.gross + other.gross, self.revenue + other.revenue
        )


# Reads kept waiting for their frontier. While a long transaction holds `xmin` back none
# settles; dropping the oldest only delays the frontier (a later read's M is higher).
MAX_PENDING = 64
Totals = dict[tuple[str, str], KindTotals]  # (kind, currency)


def merged(*parts: Totals) -> Totals:
    out: Totals = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, KindTotals()).plus(value)
    return out


def _totals(rows: Iterable[Any]) -> Totals:
    return {
        (r.kind, r.currency.strip()): KindTotals(int(r.n), Decimal(r.gross), Decimal(r.revenue)) for r in rows
    }


@dataclass
class JournalTally:
    """Kept totals up to `frontier`, and the (xmax, max id) of reads not yet settled."""

    frontier: int = 0
    kept: Totals = field(default_factory=dict)
    pending: list[tuple[Decimal, int]] = field(default_factory=list)

    async def read(self, conn: AsyncConnection) -> Totals:
        """The journal's totals as of `conn`'s snapshot (REPEATABLE READ: one snapshot)."""
        snap = (await conn.execute(_SNAPSHOT)).one()
        xmin, xmax, max_id = Decimal(snap.xmin), Decimal(snap.xmax), int(snap.max_id or 0)
        settled = [m for n, m in self.pending if n <= xmin]
        self.pending = [(n, m) for n, m in self.pending if n > xmin]
        target = max([self.frontier, *settled])
        if target > self.frontier:
            rows = await conn.execute(_RANGE, {"lo": self.frontier, "hi": target})
            self.kept = merged(self.kept, _totals(rows))
            self.frontier = target
        tail: Totals = {}
        if max_id > self.frontier:
            tail = _totals(await conn.execute(_RANGE, {"lo": self.frontier, "hi": max_id}))
            self.pending = [*self.pending[-(MAX_PENDING - 1) :], (xmax, max_id)]
        return merged(self.kept, tail)
