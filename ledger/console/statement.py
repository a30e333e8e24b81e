"""The statement CSV the console offers for download, built from the account journal.

Rows are oldest first (a statement reads top to bottom), every amount the journal's
own decimal string, so the file adds up exactly. It reads the journal through
`AccountService.journal`, page by page; the admin API's
`GET /admin/v1/accounts/{id}/statement?format=csv` is the same data for token clients.
"""

from __future__ import annotations

import csv
import io

from ledger.accounts.schemas import JournalTransaction
from ledger.accounts.service import AccountService

COLUMNS = (
    "transaction_id",
    "created_at",
    "kind",
    "amount",
    "balance_after",
    "held_change",
    "held_after",
    "reference",
    "reason",
    "hold_id",
    "actor",
)
PAGE = 500
# Free text that a spreadsheet would run as a formula (CSV injection) gets a leading quote;
# amounts are written untouched (a negative amount must stay a number).
TEXT_COLUMNS = frozenset({"reference", "reason", "actor"})
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


async def journal_rows(accounts: AccountService, account_id: str) -> list[JournalTransaction]:
    rows: list[JournalTransaction] = []
    cursor: str | None = None
    while True:
        page = await accounts.journal(account_id, cursor=cursor, limit=PAGE)
        rows.extend(page.data)
        cursor = page.next_cursor
        if cursor is None:
            return rows[::-1]


def cell(column: str, value: str | None) -> str:
    if value is None:
        return ""
    if column in TEXT_COLUMNS and value.startswith(FORMULA_START):
        return "'" + value
    return value


def to_csv(rows: list[JournalTransaction]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([cell(c, getattr(row, c)) for c in COLUMNS])
    return out.getvalue()
