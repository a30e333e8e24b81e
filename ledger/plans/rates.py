"""Materialised plan rates: the stored effective price of a model under a plan revision.

What charges a planned hold is the `plan_rates` row of (plan revision, price version,
model). Rows are written when a plan revision is published (for its currency's active
price version and every scheduled one) and when a price version is published (for every
plan's current revision of its currency), in the publishing transaction; any other pair
a hold needs (a version pinned within the grace, say) is materialised on first use by the
same pure rule (`pricing.plans.materialise`), INSERT ... ON CONFLICT DO NOTHING, then
read back: the stored row is what charges.

Both publications take the currency's plan-rates lock (`repository.lock_rates`) before
they read what the other publishes, so of two concurrent ones the second sees the
first's version or revision and materialises (and checks against MAX_RATE) that pair too.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.errors import ValidationFailed
from ledger.plans import repository
from pricing.document import ModelPrice, PriceDocument, model_price_to_builtins, parse_price_document
from pricing.errors import PriceDocumentInvalid
from pricing.plans import PlanDocument, materialise, materialise_model, parse_plan_document

PlanRef = tuple[str, int]  # (plan id, revision)


def price_of(currency: str, stored: Any) -> ModelPrice:
    """A stored effective price (`plan_rates.price`) as the engine's ModelPrice."""
    return parse_price_document({"currency": currency, "models": [stored]}, stored=True).models[0]


def refused(error: PriceDocumentInvalid, plan_id: str, version: str) -> ValidationFailed:
    return ValidationFailed(
        f"plan {plan_id} at price version {version}: {error.message}", param=error.param or "document"
    )


async def write(
    conn: AsyncConnection, plan: PlanRef, document: PlanDocument, version: str, prices: PriceDocument
) -> None:
    """Materialise every model of `prices` under the plan revision (422 when a rate is too high)."""
    try:
        effective = materialise(document, prices)
    except PriceDocumentInvalid as error:
        raise refused(error, plan[0], version) from None
    await repository.insert_rates(
        conn, plan[0], plan[1], version, [(p.model, model_price_to_builtins(p)) for p in effective]
    )


async def for_plan_revision(
    conn: AsyncConnection, plan: PlanRef, currency: str, document: PlanDocument
) -> None:
    """A revision just published: its rates at the active and every scheduled price version."""
    await repository.lock_rates(conn, currency)  # before reading the versions in use
    for row in await repository.versions_in_use(conn, currency):
        await write(conn, plan, document, row.version, parse_price_document(row.document, stored=True))


async def for_price_version(conn: AsyncConnection, version: str, prices: PriceDocument) -> None:
    """A price version just published: every plan's current revision of its currency at it."""
    await repository.lock_rates(conn, prices.currency)  # before reading the current revisions
    for row in await repository.current_revisions(conn, prices.currency):
        await write(conn, (row.plan_id, row.revision), parse_plan_document(row.document), version, prices)


async def effective(
    conn: AsyncConnection, plan: PlanRef, version: str, list_price: ModelPrice, currency: str
) -> ModelPrice:
    """The stored effective price of `list_price`'s model; materialised first when missing."""
    stored = await repository.rate(conn, plan[0], plan[1], version, list_price.model)
    if stored is None:
        row = await repository.get_revision(conn, plan[0], plan[1])
        if row is None:
            raise RuntimeError(f"plan revision {plan[0]}@{plan[1]} does not exist")
        try:
            price = materialise_model(parse_plan_document(row.document), list_price)
        except PriceDocumentInvalid as error:
            raise refused(error, plan[0], version) from None
        await repository.insert_rates(
            conn, plan[0], plan[1], version, [(price.model, model_price_to_builtins(price))]
        )  # the caller commits (READ COMMITTED: the read below sees a concurrent writer's row)
        stored = await repository.rate(conn, plan[0], plan[1], version, list_price.model)
        assert stored is not None
    return price_of(currency, stored)
