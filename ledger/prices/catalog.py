"""Reading price versions: which version applies, the pin rule, the cache, unpriced models.

- The active version for a currency at time T is the one with the latest
  `effective_at` <= T (ties: the later published). A hold pins the version it was
  sized with; its settlement uses that version whatever is published later.
- A request may pin a version only while it is in effect, or for a grace period after
  it was superseded (`check_pin`), judged by the database's clock.
- Parsed documents are cached in-process by version id: a version never changes,
  so the cache never needs invalidating; it keeps the `CACHE_SIZE` most recently used.
- A model the selected version does not price is 404 `model_not_found` when the
  ledger has never heard of it, 503 `pricing_unavailable` when it is known (see
  `PriceCatalog.unpriced`).
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.db import read_only, transaction
from ledger.errors import (
    ModelNotFound,
    PriceVersionNotEffective,
    PriceVersionNotFound,
    PriceVersionSuperseded,
    PricingUnavailable,
)
from ledger.plans import rates as plan_rates
from ledger.prices import repository
from ledger.prices.schemas import PriceVersion
from ledger.schemas import iso
from pricing import errors as pricing_errors
from pricing.bundled import UNPRICED_MODELS
from pricing.document import ModelPrice, PriceDocument, parse_price_document

CACHE_SIZE = 256


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


class PriceCatalog:
    """The published price versions as readers see them (lists, documents, a model's price)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._cache: OrderedDict[str, PriceDocument] = OrderedDict()
        # (version, plan id, plan revision, model) -> the stored effective price: immutable
        self._planned: OrderedDict[tuple[str, str, int, str], ModelPrice] = OrderedDict()

    async def get(self, version: str) -> PriceVersion:
        async with read_only(self.engine) as conn:
            row = await repository.get(conn, version)
        if row is None:
            raise PriceVersionNotFound(f"price version {version!r} does not exist", param="version")
        return view(row, with_document=True)

    async def list(self, *, cursor: str | None, limit: int) -> tuple[list[PriceVersion], str | None]:
        before = int(cursor[1:]) if cursor and cursor[1:].isascii() and cursor[1:].isdigit() else None
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

    async def model_price(
        self, *, currency: str, model: str, version: str, plan: tuple[str, int] | None = None
    ) -> ModelPrice:
        """A model's price in a given version, from the cache when possible (no connection);
        with `plan` (plan id, revision), its materialised effective price (`ledger.plans.rates`).

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
        if plan is None:
            return price
        return await self.planned_price(currency=currency, version=version, plan=plan, list_price=price)

    async def planned_price(
        self, *, currency: str, version: str, plan: tuple[str, int], list_price: ModelPrice
    ) -> ModelPrice:
        """The stored effective price of `list_price` (its model in `version`) under `plan`,
        from the cache when possible; else read, or materialised now (first use: a write).
        A caller that may still refuse (retirement, limits: the list's) judges those on
        `list_price` first, so a refused request materialises nothing."""
        key = (version, plan[0], plan[1], list_price.model)
        planned = self._planned.get(key)
        if planned is not None:
            self._planned.move_to_end(key)
            return planned

        async def work(conn: AsyncConnection) -> ModelPrice:
            return await plan_rates.effective(conn, plan, version, list_price, currency)

        planned = await transaction(self.engine, work)  # a stored row, or materialised now (first use)
        self._planned[key] = planned
        if len(self._planned) > CACHE_SIZE * 16:
            self._planned.popitem(last=False)
        return planned

    async def unpriced(
        self, conn: AsyncConnection, *, currency: str, model: str, version: str
    ) -> ModelNotFound | PricingUnavailable:
        """Why `version` cannot price `model`: the caller's mistake (404) or no valid price (503).

        A model is *known* when some price version of `currency` names it (published now
        or ever: it was withdrawn or is not priced yet), or when the bundled sheets leave it
        unpriced on purpose (`pricing.bundled.UNPRICED_MODELS`). A known model without a
        price in the selected version is 503 `pricing_unavailable`; any other
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
