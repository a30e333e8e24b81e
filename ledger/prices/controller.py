"""HTTP shape of prices: publish/list/get versions (admin) and quotes (gateway and admin)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter

from ledger.errors import InvalidJson
from ledger.http.auth import admin_guard, gateway_guard
from ledger.http.body import read
from ledger.http.request import actor_of
from ledger.openapi import SECURITY
from ledger.openapi.responses import BODY, GUARDED, refusals, replay
from ledger.prices.notices import SUNSET_HEADER, sunset_headers
from ledger.prices.schemas import ChargeQuote, PriceVersion, QuoteRequest, ReservationQuote
from ledger.prices.service import PriceService
from ledger.schemas import Page


def service(request: Request[Any, Any, Any]) -> PriceService:
    svc: PriceService = request.app.state.prices
    return svc


class AdminPriceController(Controller):
    path = "/admin/v1"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: prices"]

    @post(
        "/price-versions",
        opt={"role": "finance"},
        status_code=201,
        summary="Publish a price document as a new immutable version",
        description=(
            "Body: a price document (docs/api.md, Prices; rates are decimal strings), plus an optional "
            '`"replace": true` that allows the document to drop models the active version prices. '
            "201 with `created: true` for a new version; 200 with `created: false` and the existing "
            "version when its content is the newest version's already. `active` says whether the "
            "version is the one active now for its currency."
        ),
        responses={
            **replay(PriceVersion, "content equal to the newest version: that version, `created: false`"),
            **refusals(GUARDED, BODY),
        },
    )
    async def publish(self, request: Request[Any, Any, Any]) -> Response[PriceVersion]:
        raw = await request.body()
        try:
            msgspec.json.decode(raw)
        except msgspec.DecodeError as error:
            raise InvalidJson(f"request body is not valid JSON: {error}") from error
        version = await service(request).publish_raw(raw, actor_of(request))
        return Response(version, status_code=201 if version.created else 200)

    @get("/price-versions", summary="Price versions, newest first", responses=refusals(GUARDED))
    async def list_versions(
        self,
        request: Request[Any, Any, Any],
        limit: Annotated[int, Parameter(ge=1, le=500, default=50)],
        cursor: Annotated[str | None, Parameter(default=None, pattern=r"^v[0-9]{1,18}$")],
    ) -> Page:
        data, next_cursor = await service(request).list(cursor=cursor, limit=limit)
        return Page(data=data, next_cursor=next_cursor)

    @get(
        "/price-versions/{version:str}",
        summary="One price version with its document",
        responses=refusals(GUARDED, 404),
    )
    async def get_version(self, request: Request[Any, Any, Any], version: str) -> PriceVersion:
        return await service(request).get(version)

    @post(
        "/quotes",
        status_code=200,
        summary="Price a usage or size a reservation (no balance touched)",
        responses=refusals(GUARDED, BODY, 404, 410),
        response_headers=[SUNSET_HEADER],
    )
    async def quote(
        self, request: Request[Any, Any, Any], data: QuoteRequest
    ) -> Response[ChargeQuote | ReservationQuote]:
        answer = await service(request).quote(await read(request, QuoteRequest))
        return Response(answer, headers=sunset_headers(answer.notice))


class GatewayQuoteController(Controller):
    path = "/v1"
    guards = [gateway_guard]
    security = SECURITY
    tags = ["gateway"]

    @post(
        "/quotes",
        status_code=200,
        summary="Price a usage or size a reservation (no balance touched)",
        responses=refusals(GUARDED, BODY, 404, 410),
        response_headers=[SUNSET_HEADER],
    )
    async def quote(
        self, request: Request[Any, Any, Any], data: QuoteRequest
    ) -> Response[ChargeQuote | ReservationQuote]:
        # The gateway quotes what it may reserve: a pinned version must be pinnable.
        grace = request.app.state.settings.price_pin_grace_seconds
        answer = await service(request).quote(await read(request, QuoteRequest), pin_grace_seconds=grace)
        return Response(answer, headers=sunset_headers(answer.notice))
