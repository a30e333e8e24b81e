"""Every SQL statement of the prices domain."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_COLUMNS = "id, version, content_hash, currency, effective_at, source, published_by, published_at"

_INSERT = text(
    "INSERT INTO price_versions (content_hash, currency, effective_at, source, document, published_by) "
    "VALUES (:content_hash, :currency, :effective_at, :source, CAST(:document AS jsonb), :published_by) "
    f"RETURNING {_COLUMNS}, document"
)
_GET = text(f"SELECT {_COLUMNS}, document FROM price_versions WHERE version = :version")
_LIST = text(
    f"SELECT {_COLUMNS}, document FROM price_versions WHERE id < :before ORDER BY id DESC LIMIT :limit"
)
# The active-version rule is one SQL function (migrations/sql/ledger_active_version.sql).
_ACTIVE = text("SELECT ledger_active_version(:currency, :at)")
_ACTIVE_ROW = text(
    f"SELECT {_COLUMNS}, document FROM price_versions WHERE version = ledger_active_version(:currency, :at)"
)
_LATEST = text(
    f"SELECT {_COLUMNS}, document FROM price_versions WHERE currency = :currency ORDER BY id DESC LIMIT 1"
)
_LATEST_AFTER = text(
    f"SELECT {_COLUMNS}, document FROM price_versions WHERE currency = :currency AND id > :after "
    "ORDER BY id DESC LIMIT 1"
)
# Whether a request may pin `version` now (the pin rule, `PriceCatalog.check_pin`): its
# effective_at; when it was superseded (the earliest moment a later version of its currency
# took effect or, published with an effective_at already past, was published; NULL while
# none has); whether it ever was the active version (superseded only after it took effect
# and after it was published: a backdated version that a later one already outranked never
# was); and each tested against the database's clock.
_PIN_TERMS = text(
    """
    SELECT p.effective_at, p.superseded_at,
           p.effective_at > now() AS not_yet_effective,
           p.superseded_at IS NOT NULL
             AND p.superseded_at <= greatest(p.effective_at, p.published_at) AS never_active,
           p.superseded_at + make_interval(secs => :grace) <= now() AS past_grace
      FROM (SELECT pv.effective_at, pv.published_at,
                   (SELECT min(greatest(w.effective_at, w.published_at)) FROM price_versions w
                     WHERE w.currency = pv.currency
                       AND (w.effective_at, w.id) > (pv.effective_at, pv.id)) AS superseded_at
              FROM price_versions pv WHERE pv.version = :version) p
    """
)
_COUNT = text("SELECT count(*) FROM price_versions")
_LAST_REFRESH = text(
    "SELECT r.content_hash, r.version_id, r.action, r.refreshed_at, v.version "
    "FROM price_refreshes r JOIN price_versions v ON v.id = r.version_id "
    "WHERE r.currency = :currency ORDER BY r.id DESC LIMIT 1"
)
_RECORD_REFRESH = text(
    "INSERT INTO price_refreshes (currency, content_hash, version_id, action, refreshed_by) "
    "SELECT :currency, :content_hash, id, :action, :refreshed_by FROM price_versions WHERE version = :version"
)
# Whether any version of the currency names the model (only asked when refusing a request).
_NAMES_MODEL = text(
    "SELECT EXISTS (SELECT 1 FROM price_versions WHERE currency = :currency "
    "AND document -> 'models' @> CAST(:probe AS jsonb))"
)
_LOCK = text("SELECT pg_advisory_xact_lock(7243100002)")


async def insert(conn: AsyncConnection, **values: Any) -> Any:
    return (await conn.execute(_INSERT, values)).one()


async def get(conn: AsyncConnection, version: str) -> Any | None:
    return (await conn.execute(_GET, {"version": version})).first()


async def list_page(conn: AsyncConnection, *, before: int | None, limit: int) -> list[Any]:
    params = {"before": before if before is not None else 2**63 - 1, "limit": limit}
    return list((await conn.execute(_LIST, params)).all())


async def active_version(conn: AsyncConnection, currency: str, at: datetime) -> str | None:
    value: str | None = (await conn.execute(_ACTIVE, {"currency": currency, "at": at})).scalar()
    return value


async def active(conn: AsyncConnection, currency: str, at: datetime) -> Any | None:
    """The row of the version active for `currency` at `at` (see `active_version`)."""
    return (await conn.execute(_ACTIVE_ROW, {"currency": currency, "at": at})).first()


async def latest(conn: AsyncConnection, currency: str) -> Any | None:
    return (await conn.execute(_LATEST, {"currency": currency})).first()


async def latest_after(conn: AsyncConnection, currency: str, after: int) -> Any | None:
    """The newest version of `currency` whose row id is above `after` (0: any)."""
    return (await conn.execute(_LATEST_AFTER, {"currency": currency, "after": after})).first()


async def last_refresh(conn: AsyncConnection, currency: str) -> Any | None:
    """The latest `price_refreshes` row of `currency` (content_hash, version_id, version ...)."""
    return (await conn.execute(_LAST_REFRESH, {"currency": currency})).first()


async def record_refresh(
    conn: AsyncConnection, *, currency: str, content_hash: str, version: str, action: str, refreshed_by: str
) -> None:
    values = {
        "currency": currency,
        "content_hash": content_hash,
        "version": version,
        "action": action,
        "refreshed_by": refreshed_by,
    }
    await conn.execute(_RECORD_REFRESH, values)


async def names_model(conn: AsyncConnection, currency: str, model: str) -> bool:
    probe = msgspec.json.encode([{"model": model}]).decode()
    return bool((await conn.execute(_NAMES_MODEL, {"currency": currency, "probe": probe})).scalar())


async def pin_terms(conn: AsyncConnection, version: str, grace_seconds: int) -> Any | None:
    """`version`'s effective_at and superseded_at, and whether each bars a pin now (None: unknown)."""
    return (await conn.execute(_PIN_TERMS, {"version": version, "grace": grace_seconds})).first()


async def count(conn: AsyncConnection) -> int:
    return int((await conn.execute(_COUNT)).scalar_one())


async def lock_publishing(conn: AsyncConnection) -> None:
    """Serialize publishers, so 'publish only if changed' and first-start seeding never race."""
    await conn.execute(_LOCK)
