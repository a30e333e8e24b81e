"""Price plans: create, publish revisions (immutable, hashed), assign to accounts; audited.

- a plan's id is finance's (the rules of account ids), its currency fixed; revision 1
  comes with it, and each further revision becomes current at once: every account on
  the plan moves to it in the same transaction (its next reserve sizes with it; a hold
  keeps the revision it pinned);
- a revision's effective rates are materialised at publication (`ledger.plans.rates`)
  for the currency's active and every scheduled price version; a rate above MAX_RATE
  refuses the publication (422) and nothing is written;
- an account's plan has the account's currency (422 otherwise);
- every creation, revision and assignment is in the audit log.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger.accounts.service import check_reason
from ledger.audit import repository as audit
from ledger.context import Actor
from ledger.db import read_only, transaction
from ledger.errors import AccountNotFound, PlanExists, PlanNotFound, PriceVersionNotFound, ValidationFailed
from ledger.plans import rates as plan_rates
from ledger.plans import repository
from ledger.plans.schemas import AccountPlan, AssignPlan, CreatePlan, Plan, PlanRevision, PublishRevision
from ledger.prices import repository as prices
from ledger.schemas import iso
from pricing.document import PriceDocument, model_price_to_builtins, parse_price_document
from pricing.errors import PriceDocumentInvalid
from pricing.plans import PlanDocument, materialise_model, parse_plan_document, plan_hash, plan_to_builtins


def _document(raw: dict[str, Any]) -> PlanDocument:
    try:
        return parse_plan_document(raw)
    except PriceDocumentInvalid as error:
        param = f"document.{error.param}" if error.param else "document"
        raise ValidationFailed(error.message, param=param) from None


def plan_view(row: Any) -> Plan:
    return Plan(
        plan_id=row.id,
        currency=row.currency.strip(),
        revision=row.revision,
        created_at=iso(row.created_at),
        created_by=row.created_by,
    )


class PlanService:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def _publish(
        self,
        conn: AsyncConnection,
        plan_id: str,
        currency: str,
        revision: int,
        doc: PlanDocument,
        actor: Actor,
        reason: str,
        action: str,
    ) -> list[str]:
        builtins = plan_to_builtins(doc)
        digest = plan_hash(doc)
        await repository.insert_revision(
            conn,
            plan_id=plan_id,
            revision=revision,
            document=builtins,
            content_hash=digest,
            actor=actor.identity,
            reason=reason,
        )
        await plan_rates.for_plan_revision(conn, (plan_id, revision), currency, doc)
        moved = await repository.set_current(conn, plan_id, revision)
        await audit.record(
            conn,
            actor=actor.identity,
            role=actor.role,
            action=action,
            target=plan_id,
            reason=reason,
            details={
                "revision": revision,
                "content_hash": digest,
                "currency": currency,
                "document": builtins,
                "accounts_moved": len(moved),
            },
            request_id=actor.request_id,
        )
        return moved

    async def create(self, body: CreatePlan, actor: Actor) -> PlanRevision:
        check_reason(body.reason)
        doc = _document(body.document)

        async def work(conn: AsyncConnection) -> None:
            if not await repository.insert_plan(
                conn, plan_id=body.plan_id, currency=body.currency, actor=actor.identity
            ):
                raise PlanExists(f"plan {body.plan_id!r} already exists", param="plan_id")
            await self._publish(conn, body.plan_id, body.currency, 1, doc, actor, body.reason, "plan.create")

        await transaction(self.engine, work)
        return await self.revision(body.plan_id, 1)

    async def publish(self, plan_id: str, body: PublishRevision, actor: Actor) -> PlanRevision:
        check_reason(body.reason)
        doc = _document(body.document)

        async def work(conn: AsyncConnection) -> int:
            row = await repository.lock_plan(conn, plan_id)
            if row is None:
                raise PlanNotFound(f"plan {plan_id!r} does not exist", param="plan_id")
            revision: int = row.revision + 1
            await self._publish(
                conn, plan_id, row.currency.strip(), revision, doc, actor, body.reason, "plan.revise"
            )
            return revision

        revision = await transaction(self.engine, work)
        return await self.revision(plan_id, revision)

    async def get(self, plan_id: str) -> Plan:
        async with read_only(self.engine) as conn:
            row = await repository.get_plan(conn, plan_id)
        if row is None:
            raise PlanNotFound(f"plan {plan_id!r} does not exist", param="plan_id")
        return plan_view(row)

    async def list(self, *, cursor: str | None, limit: int) -> tuple[list[Plan], str | None]:
        async with read_only(self.engine) as conn:
            rows = await repository.list_plans(conn, after=cursor or "", limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return [plan_view(r) for r in rows], (rows[-1].id if more and rows else None)

    async def revision(
        self, plan_id: str, revision: int, *, price_version: str | None = None
    ) -> PlanRevision:
        """A revision, its document and hash, and its effective rates at `price_version` (the
        active one of its currency by default): every model of that version, each the stored
        `plan_rates` row when there is one (`"stored": true`), else computed now by the same
        pure rule (`"stored": false`). A read: it never writes."""
        async with read_only(self.engine) as conn:
            plan = await repository.get_plan(conn, plan_id)
            row = await repository.get_revision(conn, plan_id, revision)
            if plan is None or row is None:
                raise PlanNotFound(f"plan {plan_id!r} has no revision {revision}", param="revision")
            currency = plan.currency.strip()
            version = price_version or await prices.active_version(conn, currency, _now())
            rates: list[dict[str, Any]] | None = None
            if version is not None:
                version_row = await prices.get(conn, version)
                if version_row is None:
                    raise PriceVersionNotFound(
                        f"price version {version!r} does not exist", param="price_version"
                    )
                if version_row.currency.strip() != currency:
                    raise ValidationFailed(
                        f"price version {version} prices in {version_row.currency}, not {currency}",
                        param="price_version",
                    )
                stored = {r.model: r.price for r in await repository.rates(conn, plan_id, revision, version)}
                rates = _view_rates(
                    plan_id,
                    version,
                    parse_plan_document(row.document),
                    parse_price_document(version_row.document, stored=True),
                    stored,
                )
        return PlanRevision(
            plan_id=plan_id,
            revision=revision,
            content_hash=row.content_hash,
            document=row.document,
            created_at=iso(row.created_at),
            created_by=row.created_by,
            reason=row.reason,
            price_version=version,
            rates=rates,
        )

    async def assign(self, account_id: str, body: AssignPlan, actor: Actor) -> AccountPlan:
        check_reason(body.reason)

        async def work(conn: AsyncConnection) -> AccountPlan:
            # The plan first (FOR SHARE), then the account: publishing's order (plan FOR
            # UPDATE, then its accounts), so an assignment waits for a publication in
            # flight and takes the revision it made current; never a deadlock between them.
            plan = None if body.plan_id is None else await repository.share_plan(conn, body.plan_id)
            account = await repository.lock_account(conn, account_id)
            if account is None:
                raise AccountNotFound(f"account {account_id!r} does not exist", param="account_id")
            before = (
                None
                if account.plan_id is None
                else {"id": account.plan_id, "revision": account.plan_revision}
            )
            after: dict[str, Any] | None = None
            if body.plan_id is not None:
                if plan is None:
                    raise PlanNotFound(f"plan {body.plan_id!r} does not exist", param="plan_id")
                if plan.currency != account.currency:
                    raise ValidationFailed(
                        f"plan {body.plan_id} prices in {plan.currency.strip()}; account {account_id} "
                        f"is in {account.currency.strip()}",
                        param="plan_id",
                    )
                after = {"id": plan.id, "revision": plan.revision}
            await repository.assign(
                conn,
                account_id,
                None if after is None else after["id"],
                None if after is None else after["revision"],
            )
            await audit.record(
                conn,
                actor=actor.identity,
                role=actor.role,
                action="account.plan",
                target=account_id,
                reason=body.reason,
                details={"before": before, "after": after},
                request_id=actor.request_id,
            )
            return AccountPlan(account_id=account_id, plan=after)

        try:
            return await transaction(self.engine, work)
        except IntegrityError as error:  # pragma: no cover - the plan row is read in the same transaction
            raise ValidationFailed(str(error.orig), param="plan_id") from None


def _view_rates(
    plan_id: str, version: str, plan: PlanDocument, listed: PriceDocument, stored: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every model of `listed`, by name: its stored effective price, else the rule's, computed now."""
    rates: list[dict[str, Any]] = []
    for list_price in sorted(listed.models, key=lambda p: p.model):
        if list_price.model in stored:
            rates.append({**stored[list_price.model], "stored": True})
            continue
        try:
            price = materialise_model(plan, list_price)
        except PriceDocumentInvalid as error:
            raise plan_rates.refused(error, plan_id, version) from None
        rates.append({**model_price_to_builtins(price), "stored": False})
    return rates


def _now() -> datetime:
    return datetime.now(UTC)
