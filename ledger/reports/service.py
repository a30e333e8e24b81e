"""Statements and revenue reports: read-only, exact, reconciled.

Invariants:
- a statement is read in one REPEATABLE READ snapshot: its opening position, every
  entry of the period, the totals by kind and the closing position are of one moment,
  and opening + sum(entry amounts) = closing (balance and held alike);
- the CSV form is streamed from a server-side cursor, a batch of rows at a time, and
  carries the same numbers as the JSON form (an `opening` row first, a `closing` row last);
  every CSV is written by `ledger.reports.csv_writer` (text a spreadsheet would run as a
  formula gets a leading `'`; amounts stay numbers);
- revenue is the sum of the revenue shards' entries from settles and true-ups in the
  period; the groups sum to the total exactly (true-ups may be negative: refunds).

Periods are [from, to). `from` omitted: from the beginning; `to` omitted: the
snapshot's `now()`. A period whose `to` is in the past by more than the longest
running database transaction is final: entries carry their transaction's start time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.db import read_only
from ledger.errors import AccountNotFound, ValidationFailed
from ledger.reports import repository
from ledger.reports.csv_writer import CsvLayout
from ledger.reports.repository import GroupBy
from ledger.reports.schemas import KindTotal, Position, RevenueGroup, RevenueReport, Statement, StatementEntry
from ledger.schemas import iso
from pricing.money import add, format_amount

BEGINNING = datetime(1, 1, 2, tzinfo=UTC)  # before any entry; a real bound keeps the index usable
STATEMENT_CSV = CsvLayout(
    (
        "time",
        "transaction_id",
        "kind",
        "amount",
        "held_change",
        "balance_after",
        "held_after",
        "hold_id",
        "reference",
        "reason",
    ),
    numeric=("transaction_id", "amount", "held_change", "balance_after", "held_after"),
)
REVENUE_CSV = CsvLayout(("key", "amount", "settles", "true_ups"), numeric=("amount", "settles", "true_ups"))


def check_period(start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None and start >= end:
        raise ValidationFailed("'from' must be earlier than 'to'", param="from")


def entry_view(row: Any) -> StatementEntry:
    return StatementEntry(
        time=iso(row.created_at),
        transaction_id=str(row.id),
        kind=row.kind,
        amount=format_amount(row.amount),
        held_change=format_amount(row.held_change),
        balance_after=format_amount(row.balance_after),
        held_after=format_amount(row.held_after),
        hold_id=str(row.hold_id) if row.hold_id else None,
        reference=row.reference,
        reason=row.reason,
    )


def entry_row(e: StatementEntry) -> list[str | None]:
    hold_id, reference, reason = e.notes()
    return [
        e.time,
        e.transaction_id,
        e.kind,
        e.amount,
        e.held_change,
        e.balance_after,
        e.held_after,
        hold_id,
        reference,
        reason,
    ]


def position_row(kind: str, at: datetime | None, balance: Decimal, held: Decimal) -> list[str | None]:
    """The `opening` / `closing` pseudo-rows: the position at `from` / `to` in balance_after, held_after."""
    row: list[str | None] = [None] * len(STATEMENT_CSV.columns)
    row[0], row[2], row[5], row[6] = (
        (iso(at) if at else None),
        kind,
        format_amount(balance),
        format_amount(held),
    )
    return row


class StatementHead:
    """What a statement says besides its entries (read in the statement's snapshot)."""

    def __init__(
        self, account: Any, start: datetime | None, end: datetime, positions: Any, totals: list[Any]
    ):
        self.account_id: str = account.id
        self.currency: str = account.currency.strip()
        self.start = start
        self.end = end
        self.opening_balance: Decimal = positions.opening_balance
        self.opening_held: Decimal = positions.opening_held
        self.closing_balance: Decimal = positions.closing_balance
        self.closing_held: Decimal = positions.closing_held
        self.totals = {
            t.kind: KindTotal(
                count=t.count, amount=format_amount(t.amount), held_change=format_amount(t.held_change)
            )
            for t in totals
        }

    def entry_params(self) -> dict[str, Any]:
        return {
            "account_id": self.account_id,
            "start": self.start or BEGINNING,
            "end": self.end,
            "opening_balance": self.opening_balance,
            "opening_held": self.opening_held,
        }


class ReportService:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.snapshots = engine.execution_options(isolation_level="REPEATABLE READ")

    async def _head(
        self, conn: AsyncConnection, account_id: str, start: datetime | None, end: datetime | None
    ) -> StatementHead:
        check_period(start, end)
        account = await repository.account(conn, account_id)
        if account is None:
            raise AccountNotFound(f"account {account_id!r} does not exist")
        end = end or await repository.now(conn)
        check_period(start, end)
        positions = await repository.positions(conn, account_id, start or BEGINNING, end)
        totals = await repository.totals(conn, account_id, start or BEGINNING, end)
        return StatementHead(account, start, end, positions, totals)

    async def statement(self, account_id: str, start: datetime | None, end: datetime | None) -> Statement:
        async with read_only(self.snapshots) as conn:
            head = await self._head(conn, account_id, start, end)
            rows = await repository.entries(conn, **head.entry_params())
        return Statement(
            account_id=head.account_id,
            currency=head.currency,
            start=iso(head.start) if head.start else None,
            end=iso(head.end),
            opening=Position(format_amount(head.opening_balance), format_amount(head.opening_held)),
            closing=Position(format_amount(head.closing_balance), format_amount(head.closing_held)),
            totals=head.totals,
            entries=[entry_view(r) for r in rows],
        )

    async def summary(self, account_id: str, start: datetime | None, end: datetime | None) -> StatementHead:
        """A statement without its entries: opening, closing and totals by kind, of one snapshot."""
        async with read_only(self.snapshots) as conn:
            return await self._head(conn, account_id, start, end)

    async def check_statement(self, account_id: str, start: datetime | None, end: datetime | None) -> None:
        """Refuse (404, 422) before a streamed response has started and cannot change status."""
        check_period(start, end)
        async with read_only(self.engine) as conn:
            if await repository.account(conn, account_id) is None:
                raise AccountNotFound(f"account {account_id!r} does not exist")
            if start is not None and end is None:
                check_period(start, await repository.now(conn))

    async def statement_csv(
        self,
        account_id: str,
        start: datetime | None,
        end: datetime | None,
        kinds: Collection[str] | None = None,
    ) -> AsyncIterator[str]:
        """CSV text, a batch of rows per chunk: header, `opening`, entries, `closing`.

        `kinds`: only entries of these kinds (the positions stay the account's)."""
        async with read_only(self.snapshots) as conn:
            head = await self._head(conn, account_id, start, end)
            opening = position_row("opening", head.start, head.opening_balance, head.opening_held)
            yield STATEMENT_CSV.header() + STATEMENT_CSV.lines([opening])
            async for batch in repository.stream_entries(conn, **head.entry_params()):
                rows = [row for row in batch if kinds is None or row.kind in kinds]
                yield STATEMENT_CSV.lines([entry_row(entry_view(row)) for row in rows])
            yield STATEMENT_CSV.lines(
                [position_row("closing", head.end, head.closing_balance, head.closing_held)]
            )

    async def revenue(
        self, *, currency: str, group_by: GroupBy, start: datetime | None, end: datetime | None
    ) -> RevenueReport:
        check_period(start, end)
        async with read_only(self.snapshots) as conn:
            end = end or await repository.now(conn)
            check_period(start, end)
            rows = await repository.revenue(
                conn, currency=currency, group_by=group_by, start=start or BEGINNING, end=end
            )
        total = add(*(r.amount for r in rows))  # exact: the default Decimal context has 28 digits
        return RevenueReport(
            currency=currency,
            group_by=group_by,
            start=iso(start) if start else None,
            end=iso(end),
            total=format_amount(total),
            groups=[
                RevenueGroup(
                    key=r.key if r.key is not None else "(none)",
                    amount=format_amount(r.amount),
                    settles=r.settles,
                    true_ups=r.true_ups,
                )
                for r in rows
            ],
        )


def revenue_csv(report: RevenueReport) -> str:
    """Header, a row per group (its key is text: a model name, an account id, a day), `total`."""
    return REVENUE_CSV.header() + REVENUE_CSV.lines(
        [[g.key, g.amount, str(g.settles), str(g.true_ups)] for g in report.groups]
        + [["total", report.total, None, None]]
    )
