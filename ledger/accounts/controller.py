"""HTTP shape of the accounts domain: admin routes and the gateway's balance read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter

from ledger.accounts.schemas import (
    Account,
    AdjustmentRequest,
    Balance,
    CreateAccount,
    DepositRequest,
    Movement,
)
from ledger.accounts.service import AccountService
from ledger.http.auth import admin_guard, gateway_guard
from ledger.http.body import read
from ledger.http.query import time_range, utc
from ledger.http.request import actor_of
from ledger.schemas import Page

# The journal transaction kinds (journal.repository.KINDS); anything else is 422 `kind`.
JournalKind = Literal["deposit", "adjustment", "reserve", "settle", "release", "true_up"]

Limit = Annotated[int, Parameter(ge=1, le=500, default=50)]
Cursor = Annotated[str | None, Parameter(default=None, max_length=200)]


def service(request: Request[Any, Any, Any]) -> AccountService:
    svc: AccountService = request.app.state.accounts
    return svc


class AdminAccountController(Controller):
    path = "/admin/v1/accounts"
    guards = [admin_guard]
    tags = ["admin: accounts"]

    @post("/", opt={"role": "finance"}, status_code=201, summary="Open an account")
    async def create(self, request: Request[Any, Any, Any], data: CreateAccount) -> Account:
        data = await read(request, CreateAccount)
        return await service(request).create(data, actor_of(request))

    @get("/", summary="List accounts (by id, cursor-paginated)")
    async def list_accounts(self, request: Request[Any, Any, Any], limit: Limit, cursor: Cursor) -> Page:
        return await service(request).list(cursor=cursor, limit=limit)

    @get("/{account_id:str}", summary="Get an account")
    async def get_account(self, request: Request[Any, Any, Any], account_id: str) -> Account:
        return await service(request).get(account_id)

    @get("/{account_id:str}/balance", summary="Balance now, or as of a time")
    async def balance(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        as_of: Annotated[datetime | None, Parameter(default=None)],
    ) -> Balance:
        return await service(request).balance(account_id, utc(as_of, param="as_of"))

    @post("/{account_id:str}/deposits", opt={"role": "finance"}, summary="Deposit (idempotent)")
    async def deposit(
        self, request: Request[Any, Any, Any], account_id: str, data: DepositRequest
    ) -> Response[Movement]:
        data = await read(request, DepositRequest)
        movement, created = await service(request).deposit(account_id, data, actor_of(request))
        return Response(movement, status_code=201 if created else 200)

    @post("/{account_id:str}/adjustments", opt={"role": "finance"}, summary="Adjust (signed, with reason)")
    async def adjust(
        self, request: Request[Any, Any, Any], account_id: str, data: AdjustmentRequest
    ) -> Response[Movement]:
        data = await read(request, AdjustmentRequest)
        movement, created = await service(request).adjust(account_id, data, actor_of(request))
        return Response(movement, status_code=201 if created else 200)

    @get("/{account_id:str}/transactions", summary="The account's journal, newest first")
    async def transactions(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        limit: Limit,
        cursor: Cursor,
        kind: Annotated[JournalKind | None, Parameter(default=None)],
        since: Annotated[datetime | None, Parameter(query="from", default=None)],
        until: Annotated[datetime | None, Parameter(query="to", default=None)],
    ) -> Page:
        lo, hi = time_range(since, until)
        return await service(request).journal(
            account_id, cursor=cursor, limit=limit, kind=kind, since=lo, until=hi
        )


class GatewayAccountController(Controller):
    path = "/v1/accounts"
    guards = [gateway_guard]
    tags = ["gateway"]

    @get("/{account_id:str}/balance", summary="Balance, held, available")
    async def balance(self, request: Request[Any, Any, Any], account_id: str) -> Balance:
        return await service(request).balance(account_id)
