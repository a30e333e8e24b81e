"""HTTP shape of price plans (admin): create, publish revisions, read, assign to accounts."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get, post, put
from litestar.params import Parameter

from ledger.errors import PlanNotFound
from ledger.http.auth import admin_guard
from ledger.http.body import read
from ledger.http.request import actor_of
from ledger.openapi import SECURITY
from ledger.openapi.responses import BODY, GUARDED, refusals
from ledger.plans.schemas import AccountPlan, AssignPlan, CreatePlan, Plan, PlanRevision, PublishRevision
from ledger.plans.service import PlanService
from ledger.schemas import Page

PLAN_ID = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"


def service(request: Request[Any, Any, Any]) -> PlanService:
    svc: PlanService = request.app.state.plans
    return svc


class AdminPlanController(Controller):
    path = "/admin/v1"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: plans"]

    @post(
        "/plans",
        opt={"role": "finance"},
        status_code=201,
        summary="Create a price plan and its revision 1",
        description=(
            "Body: `plan_id`, `currency`, `document` (docs/plans.md) and `reason`. The revision's "
            "effective rates are materialised for the active and every scheduled price version. "
            "409 `plan_exists` for a taken id; 422 for an invalid document (nothing written)."
        ),
        responses=refusals(GUARDED, BODY, 409),
    )
    async def create(self, request: Request[Any, Any, Any], data: CreatePlan) -> PlanRevision:
        return await service(request).create(await read(request, CreatePlan), actor_of(request))

    @post(
        "/plans/{plan_id:str}/revisions",
        opt={"role": "finance"},
        status_code=201,
        summary="Publish the next revision of a plan (current at once, for every account on it)",
        responses=refusals(GUARDED, BODY, 404),
    )
    async def publish(
        self, request: Request[Any, Any, Any], plan_id: str, data: PublishRevision
    ) -> PlanRevision:
        return await service(request).publish(
            plan_id, await read(request, PublishRevision), actor_of(request)
        )

    @get("/plans", summary="Price plans, by id", responses=refusals(GUARDED))
    async def list_plans(
        self,
        request: Request[Any, Any, Any],
        limit: Annotated[int, Parameter(ge=1, le=500, default=50)],
        cursor: Annotated[str | None, Parameter(default=None, pattern=PLAN_ID)],
    ) -> Page:
        data, next_cursor = await service(request).list(cursor=cursor, limit=limit)
        return Page(data=data, next_cursor=next_cursor)

    @get("/plans/{plan_id:str}", summary="One price plan", responses=refusals(GUARDED, 404))
    async def get_plan(self, request: Request[Any, Any, Any], plan_id: str) -> Plan:
        return await service(request).get(plan_id)

    @get(
        "/plans/{plan_id:str}/revisions/{revision:str}",
        summary="One plan revision: its document, hash and effective rates",
        description="The effective rates at the active price version, or at `price_version`.",
        responses=refusals(GUARDED, 404),
    )
    async def get_revision(
        self,
        request: Request[Any, Any, Any],
        plan_id: str,
        revision: str,
        price_version: Annotated[str | None, Parameter(default=None, pattern=r"^v[0-9]{1,18}$")],
    ) -> PlanRevision:
        number = int(revision) if revision.isascii() and revision.isdigit() and len(revision) <= 9 else 0
        if number < 1:
            raise PlanNotFound(f"plan {plan_id!r} has no revision {revision!r}", param="revision")
        return await service(request).revision(plan_id, number, price_version=price_version)

    @put(
        "/accounts/{account_id:str}/plan",
        opt={"role": "finance"},
        summary="Assign a price plan to an account (or remove it: plan_id null)",
        description="The plan's currency must be the account's (422). Audit-logged.",
        responses=refusals(GUARDED, BODY, 404),
    )
    async def assign(self, request: Request[Any, Any, Any], account_id: str, data: AssignPlan) -> AccountPlan:
        return await service(request).assign(account_id, await read(request, AssignPlan), actor_of(request))
