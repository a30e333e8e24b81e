"""HTTP shape of budgets: finance sets a key's budget, viewers read keys with their current period."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get, put
from litestar.params import Parameter

from ledger.budgets.schemas import Budget, SetBudget
from ledger.budgets.service import BudgetService
from ledger.http.auth import admin_guard
from ledger.http.body import read
from ledger.http.request import actor_of
from ledger.openapi import SECURITY
from ledger.openapi.responses import BODY, GUARDED, refusals
from ledger.schemas import Page


def service(request: Request[Any, Any, Any]) -> BudgetService:
    svc: BudgetService = request.app.state.budgets
    return svc


class AdminBudgetController(Controller):
    path = "/admin/v1/accounts/{account_id:str}/budgets"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: budgets"]

    @get(
        "/",
        summary="The account's budget keys (by key), each with its current period",
        responses=refusals(GUARDED, 404),
    )
    async def list_budgets(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        limit: Annotated[int, Parameter(ge=1, le=500, default=50)],
        cursor: Annotated[str | None, Parameter(default=None, max_length=200)],
    ) -> Page:
        return await service(request).list(account_id, cursor=cursor, limit=limit)

    @get(
        "/{budget_key:str}",
        summary="One budget key: budget, current period, spent, held, remaining, alert",
        responses=refusals(GUARDED, 404),
    )
    async def get_budget(self, request: Request[Any, Any, Any], account_id: str, budget_key: str) -> Budget:
        return await service(request).get(account_id, budget_key)

    @put(
        "/{budget_key:str}",
        opt={"role": "finance"},
        summary="Set the key's budget (amount, period, alert threshold), or remove it with amount null",
        responses=refusals(GUARDED, BODY, 404),
    )
    async def set_budget(
        self, request: Request[Any, Any, Any], account_id: str, budget_key: str, data: SetBudget
    ) -> Budget:
        data = await read(request, SetBudget)
        return await service(request).set(account_id, budget_key, data, actor_of(request))
