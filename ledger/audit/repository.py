"""Append-only audit records, written in the same transaction as the action they record."""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_INSERT = text(
    "INSERT INTO audit_log (actor, role, action, target, reason, details, request_id) "
    "VALUES (:actor, :role, :action, :target, :reason, CAST(:details AS jsonb), :request_id)"
)

_LIST = text(
    "SELECT id, at, actor, role, action, target, reason, details, request_id FROM audit_log "
    "WHERE id < :before AND (CAST(:target AS text) IS NULL OR target = :target) ORDER BY id DESC LIMIT :limit"
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
    conn: AsyncConnection, *, target: str | None, before: int | None, limit: int
) -> list[Any]:
    params = {"target": target, "before": before if before is not None else 2**63 - 1, "limit": limit}
    return list((await conn.execute(_LIST, params)).all())
