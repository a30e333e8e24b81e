"""HTTP shape of reconciliation: list runs (viewer), run one pass now (finance)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import Parameter

from ledger.errors import ReconciliationRunNotFound
from ledger.http.auth import admin_guard
from ledger.http.query import UUID_PATTERN
from ledger.http.request import actor_of
from ledger.openapi import SECURITY
from ledger.openapi.responses import GUARDED, refusals
from ledger.reconciliation.schemas import ReconciliationRun
from ledger.reconciliation.service import ReconciliationService
from ledger.schemas import Page


def service(request: Request[Any, Any, Any]) -> ReconciliationService:
    svc: ReconciliationService = request.app.state.reconciliation
    return svc


class AdminReconciliationController(Controller):
    path = "/admin/v1/reconciliation/runs"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: reconciliation"]

    @get("/", summary="Reconciliation runs, newest first (cursor-paginated)", responses=refusals(GUARDED))
    async def list_runs(
        self,
        request: Request[Any, Any, Any],
        limit: Annotated[int, Parameter(ge=1, le=100, default=20)],
        cursor: Annotated[  # empty: the first page
            str | None,
            Parameter(default=None, max_length=36, schema_extra={"pattern": f"^({UUID_PATTERN[1:-1]})?$"}),
        ],
        nonempty: Annotated[
            bool, Parameter(default=False, description="only runs that resolved something, failed or erred")
        ],
    ) -> Page:
        data, next_cursor = await service(request).list(cursor=cursor, limit=limit, nonempty=nonempty)
        return Page(data=data, next_cursor=next_cursor)

    @get("/{run_id:str}", summary="One reconciliation run", responses=refusals(GUARDED, 404))
    async def get_run(self, request: Request[Any, Any, Any], run_id: str) -> ReconciliationRun:
        run = await service(request).get(run_id)
        if run is None:
            raise ReconciliationRunNotFound(f"reconciliation run {run_id!r} does not exist")
        return run

    @post(
        "/",
        opt={"role": "finance"},
        status_code=201,
        summary="Run one reconciliation pass now",
        responses=refusals(GUARDED),
    )
    async def run_now(self, request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await service(request).run_once("api", actor_of(request))
