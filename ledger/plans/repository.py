"""Every SQL statement of the plans domain (the rules: `pricing.plans`, `ledger.plans.rates`)."""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_PLAN = "p.id, p.currency, p.revision, p.created_at, p.created_by"
_REVISION = "r.plan_id, r.revision, r.document, r.content_hash, r.created_at, r.created_by, r.reason"

_INSERT_PLAN = text(
    "INSERT INTO plans (id, currency, revision, created_by) VALUES (:id, :currency, 1, :actor) "
    "ON CONFLICT (id) DO NOTHING RETURNING id"
)
_INSERT_REVISION = text(
    "INSERT INTO plan_revisions (plan_id, revision, document, content_hash, created_by, reason) "
    "VALUES (:plan_id, :revision, CAST(:document AS jsonb), :content_hash, :actor, :reason)"
)
_LOCK_PLAN = text(f"SELECT {_PLAN} FROM plans p WHERE p.id = :id FOR UPDATE")
# An assignment reads the plan's current revision under this lock (taken before the
# account's, the order publishing takes them in), so it waits for a publication in flight.
_SHARE_PLAN = text(f"SELECT {_PLAN} FROM plans p WHERE p.id = :id FOR SHARE")
_SET_CURRENT = text("UPDATE plans SET revision = :revision WHERE id = :id")
# The accounts on the plan are locked in id order first (the batch's order), then moved.
_LOCK_PLAN_ACCOUNTS = text("SELECT id FROM accounts WHERE plan_id = :id ORDER BY id FOR UPDATE")
_MOVE_ACCOUNTS = text(
    "UPDATE accounts SET plan_revision = :revision WHERE plan_id = :id AND plan_revision <> :revision "
    "RETURNING id"
)
# Serialises the publications that materialise plan rates of one currency (a plan
# revision, a price version), so each sees the other's rows and none skips a pair's
# MAX_RATE check. The two-int key space of advisory locks is apart from the bigint one.
_LOCK_RATES = text("SELECT pg_advisory_xact_lock(72431003, hashtext(:currency))")
_GET_PLAN = text(f"SELECT {_PLAN} FROM plans p WHERE p.id = :id")
_LIST_PLANS = text(f"SELECT {_PLAN} FROM plans p WHERE p.id > :after ORDER BY p.id LIMIT :limit")
_GET_REVISION = text(
    f"SELECT {_REVISION} FROM plan_revisions r WHERE r.plan_id = :id AND r.revision = :revision"
)
_CURRENT_OF_CURRENCY = text(
    f"SELECT {_REVISION} FROM plans p JOIN plan_revisions r ON r.plan_id = p.id AND r.revision = p.revision "
    "WHERE p.currency = :currency ORDER BY p.id"
)
# The active price version of the currency and every version scheduled after it.
_VERSIONS_IN_USE = text(
    "SELECT version, document FROM price_versions WHERE currency = :currency AND "
    "(version = ledger_active_version(:currency) OR effective_at > now()) ORDER BY id"
)
_RATES = text(
    "SELECT model, price FROM plan_rates WHERE plan_id = :plan_id AND revision = :revision "
    "AND price_version = :version ORDER BY model"
)
_RATE = text(
    "SELECT price FROM plan_rates WHERE plan_id = :plan_id AND revision = :revision "
    "AND price_version = :version AND model = :model"
)
_INSERT_RATE = text(
    "INSERT INTO plan_rates (plan_id, revision, price_version, model, price) "
    "VALUES (:plan_id, :revision, :version, :model, CAST(:price AS jsonb)) ON CONFLICT DO NOTHING"
)
_LOCK_ACCOUNT = text(
    "SELECT id, currency, plan_id, plan_revision FROM accounts WHERE id = :id AND kind = 'customer' "
    "FOR UPDATE"
)
_ASSIGN = text("UPDATE accounts SET plan_id = :plan_id, plan_revision = :revision WHERE id = :id")


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


async def insert_plan(conn: AsyncConnection, *, plan_id: str, currency: str, actor: str) -> bool:
    return (
        await conn.execute(_INSERT_PLAN, {"id": plan_id, "currency": currency, "actor": actor})
    ).first() is not None


async def insert_revision(
    conn: AsyncConnection,
    *,
    plan_id: str,
    revision: int,
    document: Any,
    content_hash: str,
    actor: str,
    reason: str,
) -> None:
    params = {
        "plan_id": plan_id,
        "revision": revision,
        "document": _json(document),
        "content_hash": content_hash,
        "actor": actor,
        "reason": reason,
    }
    await conn.execute(_INSERT_REVISION, params)


async def lock_plan(conn: AsyncConnection, plan_id: str) -> Any | None:
    return (await conn.execute(_LOCK_PLAN, {"id": plan_id})).first()


async def share_plan(conn: AsyncConnection, plan_id: str) -> Any | None:
    return (await conn.execute(_SHARE_PLAN, {"id": plan_id})).first()


async def lock_rates(conn: AsyncConnection, currency: str) -> None:
    """The currency's plan-rates publishing lock (transaction-level)."""
    await conn.execute(_LOCK_RATES, {"currency": currency})


async def set_current(conn: AsyncConnection, plan_id: str, revision: int) -> list[str]:
    """Make `revision` the plan's current one and move every account on the plan to it
    (locked in id order first, as the batch locks accounts)."""
    await conn.execute(_SET_CURRENT, {"id": plan_id, "revision": revision})
    await conn.execute(_LOCK_PLAN_ACCOUNTS, {"id": plan_id})
    rows = await conn.execute(_MOVE_ACCOUNTS, {"id": plan_id, "revision": revision})
    return sorted(r.id for r in rows)


async def get_plan(conn: AsyncConnection, plan_id: str) -> Any | None:
    return (await conn.execute(_GET_PLAN, {"id": plan_id})).first()


async def list_plans(conn: AsyncConnection, *, after: str, limit: int) -> list[Any]:
    return list((await conn.execute(_LIST_PLANS, {"after": after, "limit": limit})).all())


async def get_revision(conn: AsyncConnection, plan_id: str, revision: int) -> Any | None:
    return (await conn.execute(_GET_REVISION, {"id": plan_id, "revision": revision})).first()


async def current_revisions(conn: AsyncConnection, currency: str) -> list[Any]:
    return list((await conn.execute(_CURRENT_OF_CURRENCY, {"currency": currency})).all())


async def versions_in_use(conn: AsyncConnection, currency: str) -> list[Any]:
    return list((await conn.execute(_VERSIONS_IN_USE, {"currency": currency})).all())


async def rates(conn: AsyncConnection, plan_id: str, revision: int, version: str) -> list[Any]:
    params = {"plan_id": plan_id, "revision": revision, "version": version}
    return list((await conn.execute(_RATES, params)).all())


async def rate(conn: AsyncConnection, plan_id: str, revision: int, version: str, model: str) -> Any | None:
    params = {"plan_id": plan_id, "revision": revision, "version": version, "model": model}
    value: Any | None = (await conn.execute(_RATE, params)).scalar()
    return value


async def insert_rates(
    conn: AsyncConnection, plan_id: str, revision: int, version: str, prices: list[tuple[str, Any]]
) -> None:
    if not prices:
        return
    await conn.execute(
        _INSERT_RATE,
        [
            {"plan_id": plan_id, "revision": revision, "version": version, "model": m, "price": _json(p)}
            for m, p in prices
        ],
    )


async def lock_account(conn: AsyncConnection, account_id: str) -> Any | None:
    return (await conn.execute(_LOCK_ACCOUNT, {"id": account_id})).first()


async def assign(conn: AsyncConnection, account_id: str, plan_id: str | None, revision: int | None) -> None:
    await conn.execute(_ASSIGN, {"id": account_id, "plan_id": plan_id, "revision": revision})
