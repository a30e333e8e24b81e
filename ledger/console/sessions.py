"""Console sessions as the database keeps them (`console_sessions`, migration 0021).

A signed cookie is necessary but not sufficient: its nonce must name a row that is
not revoked and has not expired. Logout revokes the row, so a copied cookie stops
working in every process at once. Each login prunes expired rows.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.console.session import SessionData
from ledger.db import read_only, transaction

_OPEN = text("INSERT INTO console_sessions (nonce, actor, expires_at) VALUES (:nonce, :actor, :expires_at)")
_PRUNE = text("SELECT ledger_console_sessions_prune()")
_LIVE = text(
    "SELECT 1 FROM console_sessions WHERE nonce = :nonce AND revoked_at IS NULL AND expires_at > now()"
)
_REVOKE = text("UPDATE console_sessions SET revoked_at = now() WHERE nonce = :nonce AND revoked_at IS NULL")


async def open_session(engine: AsyncEngine, session: SessionData, actor: str) -> None:
    expires_at = datetime.fromtimestamp(session.expires, UTC)

    async def work(conn: AsyncConnection) -> None:
        await conn.execute(_PRUNE)
        await conn.execute(_OPEN, {"nonce": session.nonce, "actor": actor, "expires_at": expires_at})

    await transaction(engine, work)


async def is_live(engine: AsyncEngine, nonce: str) -> bool:
    async with read_only(engine) as conn:
        return (await conn.execute(_LIVE, {"nonce": nonce})).first() is not None


async def revoke(engine: AsyncEngine, nonce: str) -> None:
    async def work(conn: AsyncConnection) -> None:
        await conn.execute(_REVOKE, {"nonce": nonce})

    await transaction(engine, work)
