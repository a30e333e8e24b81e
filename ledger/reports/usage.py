"""The per-account usage report: requests, tokens per category and cost, by model, day or budget key.

`GET /admin/v1/accounts/{account_id}/usage` (JSON or CSV) for a period [from, to).

Invariants:
- cost is attributed by journal time, exactly as the statement attributes charges: each
  settle and true-up transaction of the account counts in the period (and the day) of its
  entries' time, whatever the hold's creation time. A group's `cost` is minus the sum of
  the account's entries of those transactions, so the report's total cost equals, to the
  last digit, minus the statement's `settle` + `true_up` totals for the same account and
  period (the statement shows balance changes: a charge is negative there, a cost here);
- `requests` and tokens count each settled hold once, in the period and group of its
  first charge (its settle transaction, or the true-up of a hold the reconciler released),
  with the tokens of its final charge (a later true-up replaces the charge lines). A
  true-up in a later period adds its cost difference there, and no request. A settled
  hold with no charge transaction at all (a free request: a charge of 0 on a hold of 0,
  e.g. a -100% plan or a model priced at 0, moves no money, so nothing is journaled)
  counts once at its `resolved_at`, with cost 0;
- tokens come from the hold's charge lines: `prompt` is the sum of every input-side line
  (input, cached_input and the cache writes: the request's prompt tokens), `completion`
  the output line, and `cached_input`, `cache_write`, `cache_write_5m`, `cache_write_1h`
  their lines (the untimed `cache_write` line excludes the 5m and 1h writes);
- one REPEATABLE READ snapshot: the account, the period's end and the rows are of one moment;
- the group of holds without a budget key has the key null (JSON) / an empty key cell
  (CSV): a budget key is free text (anything without `/`), so no marker string would be
  safe from a real key;
- the groups sum to the totals exactly; the CSV carries the same numbers as the JSON, written
  by `ledger.reports.csv_writer` (a key a spreadsheet would run as a formula is neutralised),
  with a first column `row`: `group` for a group, `total` for the totals (whose key cell is
  empty), so no key (a model or budget key named `total`) passes for the totals.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from sqlalchemy import text

from ledger.db import read_only
from ledger.errors import AccountNotFound
from ledger.reports import repository
from ledger.reports.csv_writer import CsvLayout
from ledger.reports.service import BEGINNING, ReportService, check_period
from ledger.schemas import iso
from pricing.money import add, format_amount

UsageGroupBy = Literal["model", "day", "budget_key"]
TOKEN_CATEGORIES = ("prompt", "completion", "cached_input", "cache_write", "cache_write_5m", "cache_write_1h")

USAGE_CSV = CsvLayout(
    ("row", "key", "requests", *(f"{c}_tokens" for c in TOKEN_CATEGORIES), "cost"),
    numeric=("requests", *(f"{c}_tokens" for c in TOKEN_CATEGORIES), "cost"),
)

_GROUP_KEYS: dict[str, str] = {
    "model": "model",
    "day": "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    "budget_key": "budget_key",
}
_INPUT_SIDE = "('input', 'cached_input', 'cache_write', 'cache_write_5m', 'cache_write_1h')"


def _tokens(category: str) -> str:
    where = (
        f"l ->> 'category' IN {_INPUT_SIDE}"
        if category == "prompt"
        else (
            "l ->> 'category' = 'output'" if category == "completion" else f"l ->> 'category' = '{category}'"
        )
    )
    return f"coalesce(sum(CAST(l ->> 'tokens' AS bigint)) FILTER (WHERE {where}), 0) AS {category}"


_COUNTED = ", ".join(
    f"coalesce(sum(tk.{c}) FILTER (WHERE a.first_charge), 0) AS {c}" for c in TOKEN_CATEGORIES
)
_USAGE: dict[str, Any] = {
    group_by: text(
        f"""
        WITH charges AS (
          SELECT t.id, t.kind, t.hold_id, min(e.created_at) AS at, sum(e.amount) AS amount
            FROM journal_entries e JOIN journal_transactions t ON t.id = e.transaction_id
           WHERE e.account_id = :account_id AND e.created_at >= :start AND e.created_at < :end
             AND t.kind IN ('settle', 'true_up')
           GROUP BY t.id, t.kind, t.hold_id
        ), attributed AS (
          SELECT c.at, c.amount, h.model, h.budget_key, h.charge,
                 (c.kind = 'settle' OR NOT EXISTS (
                    SELECT 1 FROM journal_transactions s WHERE s.hold_id = c.hold_id AND s.kind = 'settle'
                 )) AS first_charge
            FROM charges c LEFT JOIN holds h ON h.id = c.hold_id
          UNION ALL
          -- free requests (see above), settled holds that no settle or true-up was journaled for
          SELECT h.resolved_at, CAST(0 AS numeric), h.model, h.budget_key, h.charge, true
            FROM holds h
           WHERE h.account_id = :account_id AND h.state = 'settled'
             AND h.resolved_at >= :start AND h.resolved_at < :end
             AND NOT EXISTS (
                SELECT 1 FROM journal_transactions f
                 WHERE f.hold_id = h.id AND f.kind IN ('settle', 'true_up')
             )
        )
        SELECT {key} AS key, -sum(a.amount) AS cost,
               count(*) FILTER (WHERE a.first_charge) AS requests,
               {_COUNTED}
          FROM attributed a
          LEFT JOIN LATERAL (
            SELECT {", ".join(_tokens(c) for c in TOKEN_CATEGORIES)}
              FROM jsonb_array_elements(coalesce(a.charge -> 'lines', '[]'::jsonb)) AS l
          ) tk ON true
         GROUP BY 1 ORDER BY 1
        """
    )
    for group_by, key in _GROUP_KEYS.items()
}


class UsageTokens(msgspec.Struct, frozen=True):
    prompt: int
    completion: int
    cached_input: int
    cache_write: int
    cache_write_5m: int
    cache_write_1h: int


class UsageGroup(msgspec.Struct, frozen=True):
    key: str | None  # None: the holds without a budget key
    requests: int
    tokens: UsageTokens
    cost: str


class UsageTotals(msgspec.Struct, frozen=True):
    requests: int
    tokens: UsageTokens
    cost: str


class UsageReport(msgspec.Struct, frozen=True, rename={"start": "from", "end": "to"}):
    """sum(groups.cost) == totals.cost == -(the statement's settle + true_up amounts) for the period."""

    account_id: str
    currency: str
    group_by: str
    start: str | None
    end: str
    totals: UsageTotals
    groups: list[UsageGroup]


def _tokens_of(row: Any) -> UsageTokens:
    return UsageTokens(**{c: int(getattr(row, c)) for c in TOKEN_CATEGORIES})


async def usage_report(
    reports: ReportService,
    account_id: str,
    *,
    group_by: UsageGroupBy,
    start: datetime | None,
    end: datetime | None,
) -> UsageReport:
    """The account's usage for [start, end) (see the module docstring); 404 for an unknown account."""
    check_period(start, end)
    async with read_only(reports.snapshots) as conn:
        account = await repository.account(conn, account_id)
        if account is None:
            raise AccountNotFound(f"account {account_id!r} does not exist")
        end = end or await repository.now(conn)
        check_period(start, end)
        params = {"account_id": account_id, "start": start or BEGINNING, "end": end}
        rows = list((await conn.execute(_USAGE[group_by], params)).all())
    groups = [
        UsageGroup(
            key=row.key,
            requests=int(row.requests),
            tokens=_tokens_of(row),
            cost=format_amount(row.cost),
        )
        for row in rows
    ]
    totals = UsageTotals(
        requests=sum(g.requests for g in groups),
        tokens=UsageTokens(**{c: sum(getattr(g.tokens, c) for g in groups) for c in TOKEN_CATEGORIES}),
        cost=format_amount(add(*(row.cost for row in rows))),  # exact, as the revenue report sums
    )
    return UsageReport(
        account_id=account.id,
        currency=account.currency.strip(),
        group_by=group_by,
        start=iso(start) if start else None,
        end=iso(end),
        totals=totals,
        groups=groups,
    )


def _line(row: str, key: str | None, requests: int, tokens: UsageTokens, cost: str) -> list[str | None]:
    return [row, key, str(requests), *(str(getattr(tokens, c)) for c in TOKEN_CATEGORIES), cost]


def usage_csv(report: UsageReport) -> str:
    """Header, a `group` row per group (its key is text: a model, a day, a budget key; empty
    for the holds without a budget key), then the `total` row (its key empty)."""
    rows = [_line("group", g.key, g.requests, g.tokens, g.cost) for g in report.groups]
    rows.append(_line("total", None, report.totals.requests, report.totals.tokens, report.totals.cost))
    return USAGE_CSV.header() + USAGE_CSV.lines(rows)
