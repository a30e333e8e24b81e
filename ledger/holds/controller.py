"""HTTP shape of holds: the gateway's lifecycle calls and the admin's list / force settle / release."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter

from ledger.errors import ValidationFailed
from ledger.holds.schemas import (
    AdminReleaseRequest,
    AdminSettleRequest,
    Hold,
    InterruptRequest,
    ReserveBody,
    ReserveRequest,
    UsageRequest,
)
from ledger.holds.service import HoldService
from ledger.http.auth import admin_guard, gateway_guard
from ledger.http.body import read
from ledger.http.idempotency_key import keyed
from ledger.http.query import From, To, UuidCursor, timestamp
from ledger.http.request import actor_of
from ledger.ids import parse_uuid
from ledger.openapi import SECURITY
from ledger.openapi.responses import BODY, GUARDED, refusals, replay
from ledger.prices.notices import SUNSET_HEADER, sunset_headers
from ledger.schemas import Page

# 100 years: any larger age would reach before year 1 (a 500 from datetime arithmetic).
MAX_AGE_SECONDS = 100 * 366 * 86400

METADATA = "with metadata_value: holds whose metadata has this key with this string value (both or neither)"

HoldState = Literal["open", "interrupted", "settled", "released"]


def service(request: Request[Any, Any, Any]) -> HoldService:
    svc: HoldService = request.app.state.holds
    return svc


class GatewayHoldController(Controller):
    path = "/v1/holds"
    guards = [gateway_guard]
    security = SECURITY
    tags = ["gateway: holds"]

    @post(
        "/",
        status_code=201,
        summary="Reserve credit for a request's worst case (idempotent)",
        responses={**replay(Hold), **refusals(GUARDED, BODY, 402, 404, 409, 410)},
        response_headers=[SUNSET_HEADER],
    )
    async def reserve(self, request: Request[Any, Any, Any], data: ReserveBody) -> Response[Hold]:
        body = keyed(request, await read(request, ReserveBody), ReserveRequest)
        hold, created = await service(request).reserve(body, actor_of(request))
        return Response(hold, status_code=201 if created else 200, headers=sunset_headers(hold.notice))

    @get(
        "/{hold_id:str}",
        summary="A hold with its state, amounts, pinned price version, usage and charge",
        responses=refusals(GUARDED, 404),
        response_headers=[SUNSET_HEADER],
    )
    async def get_hold(self, request: Request[Any, Any, Any], hold_id: str) -> Response[Hold]:
        hold = await service(request).get(hold_id)
        return Response(hold, headers=sunset_headers(hold.notice))

    @post(
        "/{hold_id:str}/usage",
        status_code=200,
        summary="Streaming checkpoint: cumulative usage so far",
        responses=refusals(GUARDED, BODY, 404, 409),
    )
    async def checkpoint(self, request: Request[Any, Any, Any], hold_id: str, data: UsageRequest) -> Hold:
        data = await read(request, UsageRequest)
        return await service(request).checkpoint(hold_id, data.usage, actor_of(request))

    @post(
        "/{hold_id:str}/settle",
        status_code=200,
        summary="Final usage: charge it, release the rest",
        responses=refusals(GUARDED, BODY, 404, 409),
    )
    async def settle(self, request: Request[Any, Any, Any], hold_id: str, data: UsageRequest) -> Hold:
        data = await read(request, UsageRequest)
        return await service(request).settle(hold_id, data.usage, actor_of(request))

    @post(
        "/{hold_id:str}/interrupt",
        status_code=200,
        summary="The stream broke; keep the hold, record usage seen",
        responses=refusals(GUARDED, BODY, 404, 409),
    )
    async def interrupt(
        self, request: Request[Any, Any, Any], hold_id: str, data: InterruptRequest | None = None
    ) -> Hold:
        body = await read(request, InterruptRequest, optional=True)
        return await service(request).interrupt(hold_id, body.usage, actor_of(request))

    @post(
        "/{hold_id:str}/release",
        status_code=200,
        summary="Nothing was produced: release in full",
        responses=refusals(GUARDED, 404, 409),
    )
    async def release(self, request: Request[Any, Any, Any], hold_id: str) -> Hold:
        return await service(request).release(hold_id, actor_of(request))


class AdminHoldController(Controller):
    path = "/admin/v1/holds"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: holds"]

    @get(
        "/",
        summary="Holds by state, account, age, model, budget key, creation time and one metadata "
        "key/value (by id, cursor-paginated)",
        responses=refusals(GUARDED),
    )
    async def list_holds(
        self,
        request: Request[Any, Any, Any],
        hold_state: Annotated[HoldState | None, Parameter(query="state", default=None)],
        account_id: Annotated[str | None, Parameter(default=None)],
        older_than_seconds: Annotated[
            # schema_extra: Litestar leaves a bound of 0 out of the OpenAPI document
            int | None, Parameter(default=None, ge=0, le=MAX_AGE_SECONDS, schema_extra={"minimum": 0})
        ],
        limit: Annotated[int, Parameter(ge=1, le=500, default=50)],
        cursor: UuidCursor,
        model: Annotated[str | None, Parameter(default=None, min_length=1, max_length=200)],
        budget_key: Annotated[str | None, Parameter(default=None, min_length=1, max_length=128)],
        start_text: From,
        end_text: To,
        metadata_key: Annotated[
            str | None, Parameter(default=None, min_length=1, max_length=255, description=METADATA)
        ],
        metadata_value: Annotated[str | None, Parameter(default=None, max_length=4096, description=METADATA)],
    ) -> Page:
        if cursor is not None and parse_uuid(cursor) is None:
            raise ValidationFailed("cursor is not one this service issued", param="cursor")
        start, end = timestamp(start_text, param="from"), timestamp(end_text, param="to")
        if start is not None and end is not None and start >= end:
            raise ValidationFailed("'from' must be earlier than 'to'", param="from")
        if (metadata_key is None) != (metadata_value is None):
            missing = "metadata_value" if metadata_value is None else "metadata_key"
            raise ValidationFailed(
                "metadata_key and metadata_value go together: give both or neither", param=missing
            )
        older_than = (
            datetime.now(UTC) - timedelta(seconds=older_than_seconds)
            if older_than_seconds is not None
            else None
        )
        data, next_cursor = await service(request).page(
            state=hold_state,
            account_id=account_id,
            older_than=older_than,
            cursor=cursor,
            limit=limit,
            model=model,
            budget_key=budget_key,
            start=start,
            end=end,
            metadata=(metadata_key, metadata_value) if metadata_key is not None else None,
        )
        return Page(data=data, next_cursor=next_cursor)

    @get(
        "/{hold_id:str}",
        summary="One hold",
        responses=refusals(GUARDED, 404),
        response_headers=[SUNSET_HEADER],
    )
    async def get_hold(self, request: Request[Any, Any, Any], hold_id: str) -> Response[Hold]:
        hold = await service(request).get(hold_id)
        return Response(hold, headers=sunset_headers(hold.notice))

    @post(
        "/{hold_id:str}/settle",
        opt={"role": "finance"},
        status_code=200,
        summary="Force settle with given usage, or the largest seen (reason required)",
        responses=refusals(GUARDED, BODY, 404, 409),
    )
    async def settle(self, request: Request[Any, Any, Any], hold_id: str, data: AdminSettleRequest) -> Hold:
        data = await read(request, AdminSettleRequest)
        return await service(request).admin_settle(hold_id, data.usage, actor_of(request), reason=data.reason)

    @post(
        "/{hold_id:str}/release",
        opt={"role": "finance"},
        status_code=200,
        summary="Force release in full (reason required)",
        responses=refusals(GUARDED, BODY, 404, 409),
    )
    async def release(self, request: Request[Any, Any, Any], hold_id: str, data: AdminReleaseRequest) -> Hold:
        data = await read(request, AdminReleaseRequest)
        return await service(request).release(hold_id, actor_of(request), reason=data.reason)
