"""HTTP shape of the grants domain: finance gives credit, anyone on the admin surface reads it."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter

from ledger.grants.schemas import Grant, GrantBody, GrantRequest
from ledger.grants.service import GrantService
from ledger.http.auth import admin_guard
from ledger.http.body import read
from ledger.http.idempotency_key import keyed
from ledger.http.query import Limit, UuidCursor
from ledger.http.request import actor_of
from ledger.openapi import SECURITY
from ledger.openapi.responses import BODY, GUARDED, refusals, replay
from ledger.schemas import Page


def service(request: Request[Any, Any, Any]) -> GrantService:
    svc: GrantService = request.app.state.grants
    return svc


class AdminGrantController(Controller):
    path = "/admin/v1/accounts/{account_id:str}/grants"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: accounts"]

    @post(
        "/",
        opt={"role": "finance"},
        status_code=201,
        summary="Grant credit (idempotent): amount, expires_at, priority (lower is consumed first), reason",
        responses={**replay(Grant), **refusals(GUARDED, BODY, 404, 409)},
    )
    async def create(
        self, request: Request[Any, Any, Any], account_id: str, data: GrantBody
    ) -> Response[Grant]:
        body = keyed(request, await read(request, GrantBody), GrantRequest)
        grant, created = await service(request).grant(account_id, body, actor_of(request))
        return Response(grant, status_code=201 if created else 200)

    @get(
        "/",
        summary="The account's grants (oldest first) with remaining, consumed and expired; ?live=true: "
        "only those with money left that have not expired",
        responses=refusals(GUARDED, 404),
    )
    async def list_grants(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        limit: Limit,
        cursor: UuidCursor,
        live: Annotated[bool, Parameter(default=False)],
    ) -> Page:
        return await service(request).list(account_id, cursor=cursor, limit=limit, live=live)
