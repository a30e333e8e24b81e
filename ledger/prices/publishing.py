"""Publishing price versions: by hand, by refresh from the sources, and the first-start seed.

Every publication takes the publishing lock first, so publishers and the seed never
race, and writes its version and its audit record in one transaction. A version is
immutable once published.

- Publishing by hand (`publish`, `publish_raw`: the API and `ledger prices publish`):
  a document whose content hash equals the newest version of its currency, with the
  same `effective_at` (or none, while that version is the active one), answers that
  version with `created=False` instead of publishing a duplicate. A document that
  lacks models the active version of its currency prices is refused (422, `param`
  `models`) unless `replace` is given. The answer says whether the version is active.
- `refresh` (`ledger prices refresh` and the scheduled job) compares what its sources
  produce with what they produced at its own last successful refresh (the
  `price_refreshes` table; the first-start seed counts), never with the latest
  version, so a finance-published version is never "a change to revert":
  * sources unchanged since then, or their content is the newest version's already:
    nothing is published (`unchanged`);
  * a version of the currency was published after the last refresh (by hand): refused
    (`refuse_newer_version`) unless forced;
  * sources that change no model, rate, limit or retirement of the active version
    (only `source` text): recorded, nothing published, so a refresh never publishes an
    empty diff;
  * a rate moving by more than a factor (default 3x) against the active version:
    refused (`refuse_rate_move`) unless forced, naming the rates, so a broken feed
    cannot reprice the world;
  * otherwise it publishes and records the sources' content hash.
- `seed_if_empty` publishes the bundled or configured sources only when no version
  exists at all, and records them as the last refresh.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import ValidationFailed
from ledger.plans import rates as plan_rates
from ledger.prices import repository
from ledger.prices.catalog import view
from ledger.prices.pricing import translate_pricing_error
from ledger.prices.schemas import PriceVersion, PublishResult, RefreshOutcome
from ledger.schemas import iso
from pricing import errors as pricing_errors
from pricing.diff import compare_documents, diff_to_builtins, excessive_changes
from pricing.document import (
    PriceDocument,
    content_hash,
    document_to_builtins,
    load_document_json,
    parse_price_document,
)
from pricing.money import format_amount


def _refused(previous: PriceDocument, doc: PriceDocument, max_factor: Decimal) -> list[dict[str, Any]]:
    return [
        {
            "model": c.model,
            "table": c.table,
            "category": c.category,
            "old": None if c.old is None else format_amount(c.old),
            "new": None if c.new is None else format_amount(c.new),
        }
        for c in excessive_changes(previous, doc, max_factor)
    ]


async def insert_version(
    conn: AsyncConnection,
    doc: PriceDocument,
    actor: Actor,
    action: str,
    details: dict[str, Any] | None = None,
) -> PriceVersion:
    effective_at = doc.effective_at or datetime.now(UTC)
    stored = msgspec.structs.replace(doc, effective_at=effective_at)
    builtins = document_to_builtins(stored)
    row = await repository.insert(
        conn,
        content_hash=content_hash(stored),
        currency=doc.currency,
        effective_at=effective_at,
        source=doc.source,
        document=msgspec.json.encode(builtins).decode(),
        published_by=actor.identity,
    )
    # every plan's current revision of the currency, materialised at this version (0024)
    await plan_rates.for_price_version(conn, row.version, stored)
    await audit.record(
        conn,
        actor=actor.identity,
        role=actor.role,
        action=action,
        target=row.version,
        reason=doc.source or None,
        details={
            "content_hash": row.content_hash,
            "effective_at": iso(effective_at),
            "models": [m.model for m in doc.models],
            **(details or {}),
        },
        request_id=actor.request_id,
    )
    return view(row)


async def _is_active(conn: AsyncConnection, currency: str, version: str) -> bool:
    return await repository.active_version(conn, currency, datetime.now(UTC)) == version


async def publish(
    engine: AsyncEngine, doc: PriceDocument, actor: Actor, *, replace: bool = False
) -> PriceVersion:
    """Publish `doc` by hand (API or `ledger prices publish`); see the module docstring."""

    async def work(conn: AsyncConnection) -> PriceVersion:
        await repository.lock_publishing(conn)
        active = await repository.active(conn, doc.currency, datetime.now(UTC))
        latest = await repository.latest(conn, doc.currency)
        if latest is not None and latest.content_hash == content_hash(doc):
            same_time = (
                doc.effective_at == latest.effective_at
                if doc.effective_at is not None
                else active is not None and active.id == latest.id
            )
            if same_time:
                existing = view(latest)
                is_active = active is not None and active.id == latest.id
                return msgspec.structs.replace(existing, created=False, active=is_active)
        if active is not None and not replace:
            names = set(doc.model_names())
            missing = [m["model"] for m in active.document["models"] if m["model"] not in names]
            if missing:
                raise ValidationFailed(
                    f"the document drops {len(missing)} model(s) that the active {doc.currency} "
                    f"version {active.version} prices: {', '.join(missing)}; "
                    'send "replace": true (CLI: --replace) to publish it without them',
                    param="models",
                )
        version = await insert_version(conn, doc, actor, "prices.publish")
        is_active = await _is_active(conn, doc.currency, version.version)
        return msgspec.structs.replace(version, created=True, active=is_active)

    return await transaction(engine, work)


async def publish_raw(
    engine: AsyncEngine, raw: bytes, actor: Actor, *, replace: bool = False
) -> PriceVersion:
    """Publish a request body: a price document plus an optional `"replace": true|false`.

    `replace` is a wrapper field, taken out before the strict document parser sees the
    rest; it is not stored and not part of the content hash.
    """
    try:
        data = load_document_json(raw)
        if isinstance(data, dict) and "replace" in data:
            flag = data.pop("replace")
            if not isinstance(flag, bool):
                raise ValidationFailed('"replace" must be true or false', param="replace")
            replace = replace or flag
        doc = parse_price_document(data)  # type: ignore[arg-type]
    except pricing_errors.PriceDocumentInvalid as error:
        raise translate_pricing_error(error) from error
    return await publish(engine, doc, actor, replace=replace)


async def refresh(
    engine: AsyncEngine,
    doc: PriceDocument,
    actor: Actor,
    *,
    max_factor: Decimal,
    force: bool = False,
    dry_run: bool = False,
) -> PublishResult:
    """Publish what the sources produce (`doc`) by the refresh rule of the module docstring.

    A dry run decides exactly as a refresh would and writes nothing.
    """

    async def work(conn: AsyncConnection) -> PublishResult:
        await repository.lock_publishing(conn)
        return await _refresh(conn, doc, actor, max_factor=max_factor, force=force, dry_run=False)

    if dry_run:  # writes nothing, so it needs no lock
        async with read_only(engine) as conn:
            return await _refresh(conn, doc, actor, max_factor=max_factor, force=force, dry_run=True)
    return await transaction(engine, work)


async def _refresh(
    conn: AsyncConnection,
    doc: PriceDocument,
    actor: Actor,
    *,
    max_factor: Decimal,
    force: bool,
    dry_run: bool,
) -> PublishResult:
    digest = content_hash(doc)
    last = await repository.last_refresh(conn, doc.currency)
    latest = await repository.latest(conn, doc.currency)
    base = await repository.active(conn, doc.currency, datetime.now(UTC)) or latest
    previous = None if base is None else parse_price_document(base.document, stored=True)
    diff = None if previous is None else compare_documents(previous, doc)

    def result(outcome: RefreshOutcome, reason: str, **more: Any) -> PublishResult:
        return PublishResult(
            outcome=outcome,
            published=bool(more.pop("published", False)),
            dry_run=dry_run,
            reason=reason,
            version=more.pop("version", None if base is None else view(base)),
            against=None if base is None else base.version,
            last_refresh=None if last is None else last.version,
            diff=None if diff is None else diff_to_builtins(diff),
            **more,
        )

    async def remember(version: str, action: str) -> None:
        if not dry_run:
            await repository.record_refresh(
                conn,
                currency=doc.currency,
                content_hash=digest,
                version=version,
                action=action,
                refreshed_by=actor.identity,
            )

    if last is not None and last.content_hash == digest:
        return result(
            "unchanged",
            f"the sources are unchanged since the last refresh ({last.version}, "
            f"{iso(last.refreshed_at)}); nothing to publish",
        )
    if latest is not None and latest.content_hash == digest:
        await remember(latest.version, "adopt")
        return result("unchanged", f"the newest version {latest.version} already has the sources' content")
    newer = None
    if latest is not None:
        newer = await repository.latest_after(conn, doc.currency, 0 if last is None else last.version_id)
    if newer is not None and not force:
        since = (
            f"the last refresh ({last.version})"
            if last is not None
            else "any refresh (none is recorded for this currency)"
        )
        return result(
            "refuse_newer_version",
            f"{newer.version} was published by {newer.published_by} at {iso(newer.published_at)} "
            f"after {since}; refresh does not publish over it (--force to override)",
            newer_version=newer.version,
        )
    if diff is not None and latest is not None and diff.empty:
        # Only the sources' `source` text changed: no price moves, so no new version.
        await remember(latest.version, "adopt")
        return result(
            "unchanged", f"the sources change no model, rate, limit or retirement of {latest.version}"
        )
    refused = [] if previous is None else _refused(previous, doc, max_factor)
    if refused and not force:
        return result(
            "refuse_rate_move",
            f"refused: {len(refused)} rate(s) move by more than {max_factor}x; use --force",
            refused_changes=refused,
        )
    if dry_run:
        return result("publish", "the sources changed since the last refresh: would publish them")
    forced = {"forced_over": newer.version} if newer is not None else {}
    if refused:
        forced["forced_rate_moves"] = len(refused)
    version = await insert_version(conn, doc, actor, "prices.refresh", details=forced or None)
    await remember(version.version, "publish")
    reason = (
        "first version for this currency" if latest is None else "the sources changed since the last refresh"
    )
    if newer is not None:
        reason += f"; forced over {newer.version}"
    return result(
        "publish",
        reason,
        published=True,
        version=version,
        refused_changes=refused,
        newer_version=None if newer is None else newer.version,
    )


async def has_versions(engine: AsyncEngine) -> bool:
    async with read_only(engine) as conn:
        return await repository.count(conn) > 0


async def seed_if_empty(engine: AsyncEngine, doc: PriceDocument, actor: Actor) -> PriceVersion | None:
    """Publish `doc` only when no version exists at all (first start of a new database).

    The seed counts as a refresh: its content hash is recorded as the sources' last
    content, so the first refresh after start has nothing to publish.
    """

    async def work(conn: AsyncConnection) -> PriceVersion | None:
        await repository.lock_publishing(conn)
        if await repository.count(conn) > 0:
            return None
        version = await insert_version(conn, doc, actor, "prices.seed")
        await repository.record_refresh(
            conn,
            currency=doc.currency,
            content_hash=version.content_hash,
            version=version.version,
            action="seed",
            refreshed_by=actor.identity,
        )
        return version

    return await transaction(engine, work)
