"""Append-only audit records, written in the same transaction as the action they record.

`ACTIONS` is every action the service records; `record` refuses any other, so the
audit log's `action` filter can refuse an unknown value (a typo would otherwise
filter everything out and look like "nothing happened").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_INSERT = text(
    "INSERT INTO audit_log (actor, role, action, target, reason, details, request_id) "
    "VALUES (:actor, :role, :action, :target, :reason, CAST(:details AS jsonb), :request_id)"
)

# Every action the service records; the audit log's `action` filter takes this type.
AuditAction = Literal[
    "account.create",
    "account.update",
    "account.freeze",
    "account.unfreeze",
    "account.deposit",
    "account.adjustment",
    "account.plan",
    "plan.create",
    "plan.revise",
    "budget.set",
    "budget.remove",
    "grant.create",
    "grant.expire",
    "hold.settle",
    "hold.release",
    "prices.publish",
    "prices.refresh",
    "prices.seed",
    "reconciliation.run",
    "alert.configure",
    "alert.remove",
]
ACTIONS: tuple[str, ...] = get_args(AuditAction)

_LIST = text(
    "SELECT id, at, actor, role, action, target, reason, details, request_id FROM audit_log "
    "WHERE id < :before AND (CAST(:target AS text) IS NULL OR target = :target) "
    "AND (CAST(:action AS text) IS NULL OR action = :action) "
    "AND (CAST(:actor AS text) IS NULL OR actor = :actor) "
    "AND (CAST(:role AS text) IS NULL OR role = :role) "
    "AND (CAST(:since AS timestamptz) IS NULL OR at >= :since) "
    "AND (CAST(:until AS timestamptz) IS NULL OR at < :until) "
    "ORDER BY id DESC LIMIT :limit"
)


async def record(
    conn: AsyncConnection,
    *,
    actor: str,
    role: str,
    action: str,
    target: str | None,
    reason: str | None,
    details: dict[str, Any],
    request_id: str | None,
) -> None:
    if action not in ACTIONS:
        raise ValueError(f"audit action {action!r} is not in audit.repository.ACTIONS")
    await conn.execute(
        _INSERT,
        {
            "actor": actor,
            "role": role,
            "action": action,
            "target": target,
            "reason": reason,
            "details": msgspec.json.encode(details).decode(),
            "request_id": request_id,
        },
    )


async def list_entries(
    conn: AsyncConnection,
    *,
    target: str | None,
    before: int | None,
    limit: int,
    action: str | None = None,
    actor: str | None = None,
    role: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[Any]:
    """Newest first; each given filter narrows (time range [since, until))."""
    params = {
        "target": target,
        "before": before if before is not None else 2**63 - 1,
        "limit": limit,
        "action": action,
        "actor": actor,
        "role": role,
        "since": since,
        "until": until,
    }
    return list((await conn.execute(_LIST, params)).all())
