"""A hold as the API shows it, and the parsing the hold operations share.

Pure functions and values: no connection, no state. `HoldTerms` is what prices a hold;
every field but `state` is fixed once the hold exists, so a process may cache it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

from ledger.errors import HoldNotFound
from ledger.holds.schemas import Hold
from ledger.ids import parse_uuid
from ledger.plans.schemas import PlanRef
from ledger.prices.pricing import usage_of
from ledger.schemas import iso
from pricing.money import format_amount
from pricing.usage import Usage

UNRESOLVED = ("open", "interrupted")


def _amount(value: Decimal | None) -> str | None:
    return None if value is None else format_amount(value)


def view(row: Any) -> Hold:
    return Hold(
        id=str(row.id),
        account_id=row.account_id,
        idempotency_key=row.idempotency_key,
        state=row.state,
        model=row.model,
        price_version=row.price_version,
        amount=format_amount(row.amount),
        currency=row.currency.strip(),
        reservation=row.reservation,
        ttl_seconds=row.ttl_seconds,
        expires_at=iso(row.expires_at),
        created_at=iso(row.created_at),
        updated_at=iso(row.updated_at),
        metadata=row.metadata,
        usage=row.usage,
        charge=row.charge,
        released=_amount(row.released),
        overage=_amount(row.overage),
        overage_flagged=row.overage_flagged,
        true_up=_amount(row.true_up),
        resolved_by=row.resolved_by,
        resolved_reason=row.resolved_reason,
        resolved_at=iso(row.resolved_at) if row.resolved_at else None,
        interrupted_at=iso(row.interrupted_at) if row.interrupted_at else None,
        budget_key=row.budget_key,
        cost=cost(row),
        plan=plan_view(plan_of(row)),
    )


def cost(row: Any) -> str | None:
    """The request's cost, the one figure the gateway returns for it: what the journal charged
    the account for this hold, settle and true-up together (`charged` is the final charge, which
    a true-up rewrites); "0" once released without a charge; None while open or interrupted."""
    if row.state in UNRESOLVED:
        return None
    return format_amount(row.charged if row.charged is not None else Decimal(0))


def plan_of(row: Any) -> tuple[str, int] | None:
    """The hold's pinned plan revision (plan id, revision), None for list rates."""
    plan_id = row.plan_id
    return None if plan_id is None else (plan_id, row.plan_revision)


def plan_view(plan: tuple[str, int] | None) -> PlanRef | None:
    """How a hold, a quote and a 402 show a plan: {"id", "revision"}, or null (list rates)."""
    return None if plan is None else PlanRef(id=plan[0], revision=plan[1])


def parse(raw: dict[str, Any], *, param: str = "usage") -> Usage:
    """The request's usage object, validated (refusals: `ledger.prices.pricing`)."""
    return usage_of(raw, param=param)


def priced_counts(usage: Usage) -> tuple[int, ...]:
    """What decides the bill: two usages with equal counts are 'the same usage'."""
    return (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_tokens,
        usage.cache_write_tokens,
        usage.cache_write_5m,
        usage.cache_write_1h,
    )


class HoldTerms(NamedTuple):
    """What prices a hold; every field but `state` is immutable once the hold exists."""

    account_id: str
    currency: str
    model: str
    price_version: str
    amount: Decimal
    state: str
    n: int  # completions reserved for: the output limit is the model's max x n
    plan: tuple[str, int] | None = None  # the pinned plan revision; None: list rates


def hold_id_of(value: str) -> UUID:
    hold_id = parse_uuid(value)
    if hold_id is None:
        raise HoldNotFound(f"hold {value!r} does not exist")
    return hold_id
