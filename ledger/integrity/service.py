"""The integrity check behind GET /admin/v1/integrity and the scheduled integrity job.

It proves, over one consistent snapshot:
- every customer account's cached balance and held equal the sums of its entries;
- every account's held equals the sum of its unresolved (open, interrupted) holds;
- every grant's cached remaining and expired equal its book's entries (0013);
- every journal transaction sums to zero per currency;
- the whole journal sums to zero per currency.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.db import read_only
from ledger.integrity import repository
from ledger.schemas import iso
from pricing.money import format_amount


def build_report(snap: dict[str, Any]) -> dict[str, Any]:
    totals = {r.currency.strip(): format_amount(r.total) for r in snap["totals"]}
    mismatches = [
        {
            "account_id": r.id,
            "balance": format_amount(r.balance),
            "journal_balance": format_amount(r.journal_balance),
            "held": format_amount(r.held),
            "journal_held": format_amount(r.journal_held),
        }
        for r in snap["mismatches"]
    ]
    hold_mismatches = [
        {"account_id": r.id, "held": format_amount(r.held), "open_holds": format_amount(r.holds_open)}
        for r in snap["hold_mismatches"]
    ]
    grant_mismatches = [
        {
            "grant_id": str(r.id),
            "account_id": r.account_id,
            "remaining": format_amount(r.remaining),
            "journal_remaining": format_amount(r.journal_remaining),
            "expired": format_amount(r.expired),
            "journal_expired": format_amount(r.journal_expired),
        }
        for r in snap.get("grant_mismatches", [])
    ]
    unbalanced = [
        {
            "transaction_id": str(r.transaction_id),
            "currency": r.currency.strip(),
            "sum": format_amount(r.total),
        }
        for r in snap["unbalanced"]
    ]
    ok = (
        not mismatches
        and not hold_mismatches
        and not grant_mismatches
        and not unbalanced
        and all(v == "0" for v in totals.values())
    )
    return {
        "ok": ok,
        "checked_at": iso(datetime.now(UTC)),
        "accounts_checked": snap["counts"].accounts,
        "transactions_checked": snap["counts"].transactions,
        "entries_checked": sum(r.n for r in snap["totals"]),
        "totals": totals,
        "account_mismatches": mismatches,
        "hold_mismatches": hold_mismatches,
        "grant_mismatches": grant_mismatches,
        "unbalanced_transactions": unbalanced,
        "system_accounts": {r.id: format_amount(r.balance) for r in snap["system"]},
    }


async def check_on(conn: AsyncConnection) -> dict[str, Any]:
    """Run the check on a connection the caller controls (tests use this inside a rolled-back transaction)."""
    return build_report(await repository.snapshot(conn))


async def check(engine: AsyncEngine) -> dict[str, Any]:
    async with read_only(engine) as conn:
        await repository.begin_snapshot(conn)
        return await check_on(conn)
