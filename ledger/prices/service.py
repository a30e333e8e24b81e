"""Price versions: publish (immutable), resolve the active or pinned one, quote.

- The active version for a currency at time T is the one with the latest
  `effective_at` <= T (ties: the later published). A hold pins the version it was
  sized with; its settlement uses that version whatever is published later.
- Parsed documents are cached in-process by version id: a version never changes,
  so the cache never needs invalidating.
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
  * sources that change no model, rate or limit of the active version (only `source`
    text): recorded, nothing published, so a refresh never publishes an empty diff;
  * a rate moving by more than a factor (default 3x) against the active version:
    refused (`refuse_rate_move`) unless forced, naming the rates, so a broken feed
    cannot reprice the world;
  * otherwise it publishes and records the sources' content hash.
  All under the publishing lock, so publishers and the seed never race.
- A model the selected version does not price is 404 `model_not_found` when the
  ledger has never heard of it, 503 `pricing_unavailable` when it is known (see
  `PriceService.unpriced`).
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import (
    ModelLimitExceeded,
    ModelNotFound,
    PriceDocumentRefused,
    PriceVersionNotEffective,
    PriceVersionNotFound,
    PriceVersionSuperseded,
    PricingUnavailable,
    UsageInvalid,
    ValidationFailed,
)
from ledger.prices import repository
from ledger.prices.schemas import (
    ChargeQuote,
    PriceVersion,
    PublishResult,
    QuoteRequest,
    RefreshOutcome,
    ReservationQuote,
)
from ledger.schemas import iso
from pricing import errors as pricing_errors
from pricing.bundled import UNPRICED_MODELS
from pricing.diff import compare_documents, diff_to_builtins, excessive_changes
from pricing.document import (
    ModelPrice,
    PriceDocument,
    content_hash,
    document_to_builtins,
    load_document_json,
    parse_price_document,
)
from pricing.engine import (
    Reservation,
    charge_to_builtins,
    check_usage_limits,
    compute_charge,
    reservation_to_builtins,
    size_reservation,
)
from pricing.money import format_amount
from pricing.usage import parse_usage

CACHE_SIZE = 256


def translate_pricing_error(error: Exception) -> Exception:
    """Map the pure engine's refusals onto the ledger's error tree."""
    if isinstance(error, pricing_errors.UsageInvalid):
        return UsageInvalid(error.message, param=error.param or "usage")
    if isinstance(error, pricing_errors.ModelLimitExceeded):
        return ModelLimitExceeded(error.message, param=error.param)
    if isinstance(error, pricing_errors.PriceDocumentInvalid):
        return PriceDocumentRefused(error.message, param=error.param or None)
    if isinstance(error, pricing_errors.PricingInputError):
        return ValidationFailed(error.message, param=error.param or None)
    if isinstance(error, pricing_errors.ModelNotPriced):
        return PricingUnavailable(
            f"no valid price for model {error.model!r} in the selected price version", param="model"
        )
    return error


def size(price: ModelPrice, max_input: int | None, max_output: int | None, n: int | None) -> Reservation:
    """Size a reservation as a reserve would; the engine's refusals become ledger errors."""
    try:
        return size_reservation(price, max_input_tokens=max_input, max_output_tokens=max_output, n=n)
    except pricing_errors.PricingInputError as error:
        raise translate_pricing_error(error) from error


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


def view(row: Any, *, with_document: bool = False) -> PriceVersion:
    document: dict[str, Any] = row.document
    models = [m["model"] for m in document["models"]]
    return PriceVersion(
        version=row.version,
        content_hash=row.content_hash,
        currency=row.currency.strip(),
        effective_at=iso(row.effective_at),
        source=row.source,
        published_by=row.published_by,
        published_at=iso(row.published_at),
        models=models,
        document=document if with_document else None,
    )


class PriceService:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._cache: OrderedDict[str, PriceDocument] = OrderedDict()

    # --- publishing --------------------------------------------------------------

    async def _insert(
        self,
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

    @staticmethod
    async def _is_active(conn: AsyncConnection, currency: str, version: str) -> bool:
        return await repository.active_version(conn, currency, datetime.now(UTC)) == version

    async def publish(self, doc: PriceDocument, actor: Actor, *, replace: bool = False) -> PriceVersion:
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
            version = await self._insert(conn, doc, actor, "prices.publish")
            is_active = await self._is_active(conn, doc.currency, version.version)
            return msgspec.structs.replace(version, created=True, active=is_active)

        return await transaction(self.engine, work)

    async def publish_raw(self, raw: bytes, actor: Actor, *, replace: bool = False) -> PriceVersion:
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
        return await self.publish(doc, actor, replace=replace)

    async def refresh(
        self,
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
            return await self._refresh(conn, doc, actor, max_factor=max_factor, force=force, dry_run=False)

        if dry_run:  # writes nothing, so it needs no lock
            async with read_only(self.engine) as conn:
                return await self._refresh(conn, doc, actor, max_factor=max_factor, force=force, dry_run=True)
        return await transaction(self.engine, work)

    async def _refresh(
        self,
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
            return result(
                "unchanged", f"the newest version {latest.version} already has the sources' content"
            )
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
            return result("unchanged", f"the sources change no model, rate or limit of {latest.version}")
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
        version = await self._insert(conn, doc, actor, "prices.refresh", details=forced or None)
        await remember(version.version, "publish")
        reason = (
            "first version for this currency"
            if latest is None
            else "the sources changed since the last refresh"
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

    async def has_versions(self) -> bool:
        async with read_only(self.engine) as conn:
            return await repository.count(conn) > 0

    async def seed_if_empty(self, doc: PriceDocument, actor: Actor) -> PriceVersion | None:
        """Publish `doc` only when no version exists at all (first start of a new database).

        The seed counts as a refresh: its content hash is recorded as the sources' last
        content, so the first refresh after start has nothing to publish.
        """

        async def work(conn: AsyncConnection) -> PriceVersion | None:
            await repository.lock_publishing(conn)
            if await repository.count(conn) > 0:
                return None
            version = await self._insert(conn, doc, actor, "prices.seed")
            await repository.record_refresh(
                conn,
                currency=doc.currency,
                content_hash=version.content_hash,
                version=version.version,
                action="seed",
                refreshed_by=actor.identity,
            )
            return version

        return await transaction(self.engine, work)

    # --- reading -----------------------------------------------------------------

    async def get(self, version: str) -> PriceVersion:
        async with read_only(self.engine) as conn:
            row = await repository.get(conn, version)
        if row is None:
            raise PriceVersionNotFound(f"price version {version!r} does not exist", param="version")
        return view(row, with_document=True)

    async def list(self, *, cursor: str | None, limit: int) -> tuple[list[PriceVersion], str | None]:
        before = int(cursor[1:]) if cursor and cursor[1:].isdigit() else None
        async with read_only(self.engine) as conn:
            rows = await repository.list_page(conn, before=before, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return [view(r) for r in rows], (rows[-1].version if more and rows else None)

    async def document(self, conn: AsyncConnection, version: str) -> PriceDocument:
        doc = self._cache.get(version)
        if doc is not None:
            self._cache.move_to_end(version)
            return doc
        row = await repository.get(conn, version)
        if row is None:
            raise PriceVersionNotFound(f"price version {version!r} does not exist", param="price_version")
        doc = parse_price_document(row.document, stored=True)
        self._cache[version] = doc
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return doc

    async def resolve(
        self,
        conn: AsyncConnection,
        *,
        currency: str,
        model: str,
        pinned: str | None,
        at: datetime | None = None,
    ) -> tuple[str, ModelPrice]:
        """The price version to use and the model's price in it (404 pinned-unknown, 503 none)."""
        if pinned is not None:
            version = pinned
        else:
            active = await repository.active_version(conn, currency, at or datetime.now(UTC))
            if active is None:
                raise PricingUnavailable(f"no price version is active for {currency}", param="model")
            version = active
        doc = await self.document(conn, version)
        price = self._model_in(doc, version, currency, model)
        if price is None:
            raise await self.unpriced(conn, currency=currency, model=model, version=version)
        return version, price

    async def check_pin(self, version: str, grace_seconds: int) -> None:
        """Refuse pinning `version` now unless it is in effect, or superseded less than
        `grace_seconds` ago (so a quote just given still holds): 404 for an unknown version,
        422 `price_version_not_effective` before its effective_at, 422
        `price_version_superseded` past the grace or when it never was the active version (a
        backdated publication already outranked). Judged by the database's clock."""
        async with read_only(self.engine) as conn:
            row = await repository.pin_terms(conn, version, grace_seconds)
        if row is None:
            raise PriceVersionNotFound(f"price version {version!r} does not exist", param="price_version")
        if row.not_yet_effective:
            raise PriceVersionNotEffective(
                f"price version {version} takes effect at {iso(row.effective_at)}; "
                "a request may not pin it before then",
                param="price_version",
            )
        if row.never_active:
            raise PriceVersionSuperseded(
                f"price version {version} was never in effect: a later version of its currency already "
                "applied when it was published (or took effect); omit price_version to use the active one",
                param="price_version",
            )
        if row.past_grace:
            raise PriceVersionSuperseded(
                f"price version {version} was superseded at {iso(row.superseded_at)}; it may be pinned "
                f"for {grace_seconds} s after that, no longer: omit price_version to use the active one",
                param="price_version",
            )

    async def model_price(self, *, currency: str, model: str, version: str) -> ModelPrice:
        """A model's price in a given version, from the cache when possible (no connection).

        A model the version does not price is 404 `model_not_found` or 503
        `pricing_unavailable` (see `unpriced`)."""
        doc = self._cache.get(version)
        if doc is None:
            async with read_only(self.engine) as conn:
                doc = await self.document(conn, version)
        price = self._model_in(doc, version, currency, model)
        if price is None:
            async with read_only(self.engine) as conn:
                raise await self.unpriced(conn, currency=currency, model=model, version=version)
        return price

    async def unpriced(
        self, conn: AsyncConnection, *, currency: str, model: str, version: str
    ) -> ModelNotFound | PricingUnavailable:
        """Why `version` cannot price `model`: the caller's mistake (404) or no valid price (503).

        A model is *known* when some price version of `currency` names it (published now
        or ever: it was withdrawn or is not priced yet), or when the bundled sheets leave it
        unpriced on purpose (`pricing.bundled.UNPRICED_MODELS`). A known model without a
        price in the selected version is 503 `pricing_unavailable`, as before; any other
        name is 404 `model_not_found`. Only refusals pay for this lookup.
        """
        if model in UNPRICED_MODELS or await repository.names_model(conn, currency, model):
            return PricingUnavailable(
                f"no valid price for model {model!r} in price version {version}", param="model"
            )
        return ModelNotFound(
            f"model {model!r} is not known: no {currency} price version names it", param="model"
        )

    @staticmethod
    def _model_in(doc: PriceDocument, version: str, currency: str, model: str) -> ModelPrice | None:
        """The model's price in `doc`; None when the document does not price it."""
        if doc.currency != currency:
            raise PricingUnavailable(
                f"price version {version} prices in {doc.currency}, not {currency}", param="price_version"
            )
        try:
            return doc.model(model)
        except pricing_errors.ModelNotPriced:
            return None

    # --- quoting -----------------------------------------------------------------

    async def quote(
        self, body: QuoteRequest, *, pin_grace_seconds: int | None = None
    ) -> ChargeQuote | ReservationQuote:
        """Price a usage or size a reservation. With `pin_grace_seconds` (the gateway's
        quotes) a pinned version must be one a reserve could pin (`check_pin`); without it
        (finance's quotes) any published version may be quoted, a future one included."""
        # `n` may come with usage: the completion limit, as at settle, is n x the model's output.
        sizing = (body.max_output_tokens, body.max_input_tokens)
        if body.usage is not None and any(v is not None for v in sizing):
            raise ValidationFailed("give either usage or the reservation fields, not both", param="usage")
        if body.price_version is not None and pin_grace_seconds is not None:
            await self.check_pin(body.price_version, pin_grace_seconds)
        async with read_only(self.engine) as conn:
            version, price = await self.resolve(
                conn, currency=body.currency, model=body.model, pinned=body.price_version
            )
        if body.usage is not None:
            try:
                usage = parse_usage(body.usage)
                check_usage_limits(price, usage, n=body.n or 1)  # a settle would refuse it too
                charge = compute_charge(price, usage)
            except pricing_errors.PricingInputError as error:
                raise translate_pricing_error(error) from error
            return ChargeQuote(model=body.model, price_version=version, charge=charge_to_builtins(charge))
        reservation = size(price, body.max_input_tokens, body.max_output_tokens, body.n)
        return ReservationQuote(
            model=body.model, price_version=version, reservation=reservation_to_builtins(reservation)
        )
