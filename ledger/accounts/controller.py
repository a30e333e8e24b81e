"""HTTP shape of the accounts domain: admin routes and the gateway's balance read."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, get, patch, post
from litestar.params import Parameter

from ledger.accounts.schemas import (
    Account,
    AdjustmentBody,
    AdjustmentRequest,
    Balance,
    CreateAccount,
    DepositBody,
    DepositRequest,
    FreezeRequest,
    Movement,
    UpdateAccount,
)
from ledger.accounts.service import AccountService
from ledger.http.auth import admin_guard, gateway_guard
from ledger.http.body import read
from ledger.http.idempotency_key import keyed
from ledger.http.query import AsOf, Cursor, From, IdCursor, Limit, To, time_range, timestamp
from ledger.http.request import actor_of
from ledger.openapi import SECURITY
from ledger.openapi.responses import BODY, GUARDED, refusals, replay
from ledger.schemas import Page

# The journal transaction kinds (journal.repository.KINDS); anything else is 422 `kind`.
JournalKind = Literal[
    "deposit", "adjustment", "reserve", "settle", "release", "true_up", "grant", "grant_expiry"
]


def service(request: Request[Any, Any, Any]) -> AccountService:
    svc: AccountService = request.app.state.accounts
    return svc


class AdminAccountController(Controller):
    path = "/admin/v1/accounts"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: accounts"]

    @post(
        "/",
        opt={"role": "finance"},
        status_code=201,
        summary="Open an account",
        responses=refusals(GUARDED, BODY, 409),
    )
    async def create(self, request: Request[Any, Any, Any], data: CreateAccount) -> Account:
        data = await read(request, CreateAccount)
        return await service(request).create(data, actor_of(request))

    @get(
        "/",
        summary="List accounts (by id, cursor-paginated); ?below_zero=true: balance < 0 only; "
        "?review=true: only those marked for review",
        responses=refusals(GUARDED),
    )
    async def list_accounts(
        self,
        request: Request[Any, Any, Any],
        limit: Limit,
        cursor: Cursor,
        below_zero: Annotated[bool, Parameter(default=False)],
        review: Annotated[bool | None, Parameter(default=None)],
    ) -> Page:
        return await service(request).list(cursor=cursor, limit=limit, below_zero=below_zero, review=review)

    @get("/{account_id:str}", summary="Get an account", responses=refusals(GUARDED, 404))
    async def get_account(self, request: Request[Any, Any, Any], account_id: str) -> Account:
        return await service(request).get(account_id)

    @patch(
        "/{account_id:str}",
        opt={"role": "finance"},
        summary="Set credit limit and/or metadata (with reason)",
        responses=refusals(GUARDED, BODY, 404),
    )
    async def update(self, request: Request[Any, Any, Any], account_id: str, data: UpdateAccount) -> Account:
        data = await read(request, UpdateAccount)
        return await service(request).update(account_id, data, actor_of(request))

    @post(
        "/{account_id:str}/freeze",
        opt={"role": "finance"},
        status_code=200,
        summary="Freeze: refuse new reservations (idempotent)",
        responses=refusals(GUARDED, BODY, 404),
    )
    async def freeze(self, request: Request[Any, Any, Any], account_id: str, data: FreezeRequest) -> Account:
        data = await read(request, FreezeRequest)
        return await service(request).freeze(account_id, data, actor_of(request))

    @post(
        "/{account_id:str}/unfreeze",
        opt={"role": "finance"},
        status_code=200,
        summary="Unfreeze (idempotent)",
        responses=refusals(GUARDED, BODY, 404),
    )
    async def unfreeze(
        self, request: Request[Any, Any, Any], account_id: str, data: FreezeRequest
    ) -> Account:
        data = await read(request, FreezeRequest)
        return await service(request).unfreeze(account_id, data, actor_of(request))

    @get(
        "/{account_id:str}/balance", summary="Balance now, or as of a time", responses=refusals(GUARDED, 404)
    )
    async def balance(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        as_of: AsOf,
    ) -> Balance:
        return await service(request).balance(account_id, timestamp(as_of, param="as_of"))

    @post(
        "/{account_id:str}/deposits",
        opt={"role": "finance"},
        status_code=201,
        summary="Deposit (idempotent)",
        responses={**replay(Movement), **refusals(GUARDED, BODY, 404, 409)},
    )
    async def deposit(
        self, request: Request[Any, Any, Any], account_id: str, data: DepositBody
    ) -> Response[Movement]:
        body = keyed(request, await read(request, DepositBody), DepositRequest)
        movement, created = await service(request).deposit(account_id, body, actor_of(request))
        return Response(movement, status_code=201 if created else 200)

    @post(
        "/{account_id:str}/adjustments",
        opt={"role": "finance"},
        status_code=201,
        summary="Adjust (signed, with reason)",
        responses={**replay(Movement), **refusals(GUARDED, BODY, 404, 409)},
    )
    async def adjust(
        self, request: Request[Any, Any, Any], account_id: str, data: AdjustmentBody
    ) -> Response[Movement]:
        body = keyed(request, await read(request, AdjustmentBody), AdjustmentRequest)
        movement, created = await service(request).adjust(account_id, body, actor_of(request))
        return Response(movement, status_code=201 if created else 200)

    @get(
        "/{account_id:str}/transactions",
        summary="The account's journal, newest first",
        responses=refusals(GUARDED, 404),
    )
    async def transactions(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        limit: Limit,
        cursor: IdCursor,
        kind: Annotated[JournalKind | None, Parameter(default=None)],
        since: From,
        until: To,
    ) -> Page:
        lo, hi = time_range(since, until)
        return await service(request).journal(
            account_id, cursor=cursor, limit=limit, kind=kind, since=lo, until=hi
        )


class GatewayAccountController(Controller):
    path = "/v1/accounts"
    guards = [gateway_guard]
    security = SECURITY
    tags = ["gateway"]

    @get("/{account_id:str}/balance", summary="Balance, held, available", responses=refusals(GUARDED, 404))
    async def balance(self, request: Request[Any, Any, Any], account_id: str) -> Balance:
        return await service(request).balance(account_id)
