"""Budgets per (account, budget key): finance sets them, reserves are checked against them.

Scope: a budget belongs to one account and one `budget_key` inside it (a gateway's API key
or project of that customer). A reserve naming a key without a budget is allowed (spend
is tracked from the first use, so finance can budget a key that is already in use).

Invariants:
- a reserve naming a key with a budget succeeds only if the key's current-period spend
  plus its unresolved holds plus the new hold stay within the budget; checked and held by
  the batch function (`ledger_budget_hold`) under the account lock, then the budget row
  lock, so parallel reserves on one key can never together pass it (402
  `budget_exceeded`, nothing held); when funds are short too, 402 `insufficient_funds`;
- `held` of a key is the sum of its unresolved holds: a settle or release takes the hold
  out, a settle's charge (and a true-up's difference) is added to the spend;
- the database refuses negative spend or held, a budget <= 0, a threshold outside (0, 1];
- setting or removing a budget locks the account row, then the budget row, and is
  audit-logged with the terms before and after; a PUT that changes nothing writes nothing.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.accounts import repository as accounts
from ledger.accounts.service import check_reason, require_locked
from ledger.audit import repository as audit
from ledger.budgets import repository
from ledger.budgets.schemas import Budget, SetBudget
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import AccountNotFound, BudgetExceeded, BudgetNotFound, ValidationFailed
from ledger.metrics import BUDGET_ALERTS
from ledger.money import parse_money
from ledger.schemas import Page, iso
from pricing.money import EXACT, format_amount

log = structlog.get_logger(__name__)

# NUMERIC(38, 12) holds |x| < 10^26.
MAX_BUDGET = Decimal(10) ** 26
MAX_KEY_LENGTH = 128


def day_start(value: date | None) -> str | None:
    """A UTC calendar day's first instant, in the wire's timestamp format."""
    return None if value is None else f"{value.isoformat()}T00:00:00Z"


def _amount(value: Decimal | None) -> str | None:
    return None if value is None else format_amount(value)


def remaining_of(amount: Decimal, spent: Decimal, held: Decimal) -> Decimal:
    return max(EXACT.subtract(EXACT.subtract(amount, spent), held), Decimal(0))


def budget_view(row: Any) -> Budget:
    amount: Decimal | None = row.amount
    threshold: Decimal | None = row.alert_threshold
    crossed = amount is not None and threshold is not None and row.period_spent >= threshold * amount
    return Budget(
        account_id=row.account_id,
        budget_key=row.budget_key,
        currency=row.currency.strip(),
        amount=_amount(amount),
        period=row.period,
        alert_threshold=_amount(threshold),
        period_start=day_start(row.period_start),
        period_end=day_start(row.period_end),
        spent=format_amount(row.period_spent),
        held=format_amount(row.held),
        remaining=None if amount is None else format_amount(remaining_of(amount, row.period_spent, row.held)),
        alert_crossed=crossed,
        alerted_at=iso(row.alerted_at) if row.alerted_in_period else None,
        lifetime_spent=format_amount(row.spent),
        created_at=iso(row.created_at),
        updated_at=iso(row.updated_at),
    )


def check_key(budget_key: str) -> str:
    """A budget key named in a path: 1..128 characters (NUL is refused by admission)."""
    if not 1 <= len(budget_key) <= MAX_KEY_LENGTH:
        raise ValidationFailed(f"budget_key must be 1 to {MAX_KEY_LENGTH} characters", param="budget_key")
    return budget_key


def parse_terms(body: SetBudget) -> tuple[Decimal | None, str | None, Decimal | None]:
    """(amount, period, alert_threshold) of a PUT; all None removes the budget."""
    if body.amount is None:
        for name in ("period", "alert_threshold"):
            if getattr(body, name) is not None:
                raise ValidationFailed(f"{name} cannot be given when amount is null (removal)", param=name)
        return None, None, None
    amount = parse_money(body.amount, param="amount")
    if amount <= 0:
        raise ValidationFailed("a budget amount must be greater than zero", param="amount")
    if amount >= MAX_BUDGET:
        raise ValidationFailed("a budget amount must be below 10^26", param="amount")
    if body.period is None:
        raise ValidationFailed(
            "period is required with an amount: daily, weekly, monthly or none", param="period"
        )
    threshold = None
    if body.alert_threshold is not None:
        threshold = parse_money(body.alert_threshold, param="alert_threshold")
        if not Decimal(0) < threshold <= Decimal(1):
            raise ValidationFailed(
                "alert_threshold is a fraction of the amount: above 0 and at most 1", param="alert_threshold"
            )
    return amount, body.period, threshold


def exceeded(
    detail: dict[str, Any],
    *,
    budget_key: str,
    required: Decimal,
    currency: str,
    plan: tuple[str, int] | None = None,
) -> BudgetExceeded:
    """The 402 of a reserve refused by its key's budget (`detail`: what `ledger_budget_hold`
    answered: budget, spent and held in the current period, its first and after-last days;
    `plan`: the price plan revision the reservation was sized with, as `insufficient_funds`
    shows it)."""
    budget, spent, held = Decimal(detail["budget"]), Decimal(detail["spent"]), Decimal(detail["held"])
    start, end = detail["period_start"], detail["period_end"]
    return BudgetExceeded(
        f"reservation of {format_amount(required)} {currency} would take budget key {budget_key!r} past its "
        f"budget of {format_amount(budget)} {currency} (spent {format_amount(spent)}, held "
        f"{format_amount(held)} in the current period)",
        param="budget_key",
        extra={
            "budget_key": budget_key,
            "budget": format_amount(budget),
            "spent": format_amount(spent),
            "held": format_amount(held),
            "required": format_amount(required),
            "currency": currency,
            "period_start": day_start(None if start is None else date.fromisoformat(start)),
            "period_end": day_start(None if end is None else date.fromisoformat(end)),
            "plan": None if plan is None else {"id": plan[0], "revision": plan[1]},
        },
    )


def report_alert(
    *, account_id: str, budget_key: str, amount: Decimal, period: str, threshold: Decimal, spent: Decimal
) -> None:
    """The warning and the metric of a settle that took a key's period spend to its alert threshold."""
    BUDGET_ALERTS.labels(period).inc()
    log.warning(
        "budget.alert_threshold_reached",
        account_id=account_id,
        budget_key=budget_key,
        budget=format_amount(amount),
        period=period,
        alert_threshold=format_amount(threshold),
        spent=format_amount(spent),
    )


def report_movement(row: Any | None) -> None:
    """Report the alert of a movement (`repository.move`'s row, or the `budget_alert` of a
    batched settle's detail), if it raised one."""
    if row is None:
        return
    if isinstance(row, dict):
        report_alert(
            account_id=row["account_id"],
            budget_key=row["budget_key"],
            amount=Decimal(row["amount"]),
            period=row["period"],
            threshold=Decimal(row["alert_threshold"]),
            spent=Decimal(row["period_spent"]),
        )
    elif row.alerted:
        report_alert(
            account_id=row.account_id,
            budget_key=row.budget_key,
            amount=row.amount,
            period=row.period,
            threshold=row.alert_threshold,
            spent=row.period_spent,
        )


class BudgetService:
    def __init__(self, engine: AsyncEngine, *, reads: AsyncEngine | None = None) -> None:
        self.engine = engine
        # The admin surface's lists and histories (LEDGER_READ_DATABASE_URL: a standby); the
        # primary's engine when none is configured. Nothing that writes uses it.
        self.reads = reads or engine

    async def get(self, account_id: str, budget_key: str) -> Budget:
        key = check_key(budget_key)
        async with read_only(self.engine) as conn:
            row = await repository.get(conn, account_id, key)
            if row is None:
                await self._require_account(conn, account_id)
        if row is None:
            raise BudgetNotFound(f"account {account_id!r} has no budget key {key!r}", param="budget_key")
        return budget_view(row)

    async def list(self, account_id: str, *, cursor: str | None, limit: int) -> Page:
        """Every key the account has budgeted or reserved with, by key."""
        async with read_only(self.reads) as conn:
            await self._require_account(conn, account_id)
            rows = await repository.list_page(conn, account_id, after=cursor or "", limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(
            data=[budget_view(r) for r in rows], next_cursor=rows[-1].budget_key if more and rows else None
        )

    @staticmethod
    async def _require_account(conn: AsyncConnection, account_id: str) -> None:
        if await accounts.get(conn, account_id) is None:
            raise AccountNotFound(f"account {account_id!r} does not exist")

    async def set(self, account_id: str, budget_key: str, body: SetBudget, actor: Actor) -> Budget:
        """Set (or with amount null remove) the key's budget; audit-logged when it changes."""
        key = check_key(budget_key)
        reason = check_reason(body.reason)
        amount, period, threshold = parse_terms(body)

        async def work(conn: AsyncConnection) -> Budget:
            await require_locked(conn, account_id)
            row = await repository.lock(conn, account_id, key)
            if row is None and amount is None:
                raise BudgetNotFound(f"account {account_id!r} has no budget key {key!r}", param="budget_key")
            before = (row.amount, row.period, row.alert_threshold) if row is not None else (None, None, None)
            if row is None or before != (amount, period, threshold):
                await repository.set_terms(
                    conn, account_id, key, amount=amount, period=period, alert_threshold=threshold
                )
                await audit.record(
                    conn,
                    actor=actor.identity,
                    role=actor.role,
                    action="budget.remove" if amount is None else "budget.set",
                    target=account_id,
                    reason=reason,
                    details={
                        "budget_key": key,
                        "before": _terms(*before),
                        "after": _terms(amount, period, threshold),
                    },
                    request_id=actor.request_id,
                )
            view = await repository.get(conn, account_id, key)
            assert view is not None
            return budget_view(view)

        return await transaction(self.engine, work)


def _terms(amount: Decimal | None, period: str | None, threshold: Decimal | None) -> dict[str, Any]:
    return {"amount": _amount(amount), "period": period, "alert_threshold": _amount(threshold)}
