"""HTTP shape of the request log's lookup: a hold found by the gateway's request id.

The gateway's request id is the reserve's `idempotency_key`, unique per account (the
unique index on holds (account_id, idempotency_key) serves the lookup: one indexed
read on the primary, so a gateway finds the hold it has just reserved). The key is
checked as a reserve checks it (1..255 characters; else 422 naming `idempotency_key`).
No hold under that account and key, an unknown account included, is 404 `hold_not_found`.
The answer is the single hold's GET of that hold: the same body, its model's retirement
`notice` included, and the same `Sunset` header (`ledger.prices.notices`).
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, get
from litestar.params import Parameter

from ledger.holds.controller import service
from ledger.holds.schemas import Hold
from ledger.http.auth import admin_guard, gateway_guard
from ledger.openapi import SECURITY
from ledger.openapi.responses import GUARDED, refusals
from ledger.prices.notices import SUNSET_HEADER, sunset_headers

RequestKey = Annotated[
    str,
    Parameter(
        query="idempotency_key",
        min_length=1,
        max_length=255,
        description="the reserve's idempotency key (the gateway's request id)",
    ),
]
SUMMARY = "The hold a reserve made with this idempotency key (the gateway's request id)"


async def by_key(request: Request[Any, Any, Any], account_id: str, idempotency_key: str) -> Response[Hold]:
    """As the single hold's GET answers: the hold with its notice, and the `Sunset` header."""
    hold = await service(request).get_by_key(account_id, idempotency_key)
    return Response(hold, headers=sunset_headers(hold.notice))


class GatewayHoldLookupController(Controller):
    path = "/v1/accounts"
    guards = [gateway_guard]
    security = SECURITY
    tags = ["gateway: holds"]

    @get(
        "/{account_id:str}/holds/by-key",
        summary=SUMMARY,
        responses=refusals(GUARDED, 404),
        response_headers=[SUNSET_HEADER],
    )
    async def by_key(
        self, request: Request[Any, Any, Any], account_id: str, idempotency_key: RequestKey
    ) -> Response[Hold]:
        return await by_key(request, account_id, idempotency_key)


class AdminHoldLookupController(Controller):
    path = "/admin/v1/accounts"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: holds"]

    @get(
        "/{account_id:str}/holds/by-key",
        summary=SUMMARY,
        responses=refusals(GUARDED, 404),
        response_headers=[SUNSET_HEADER],
    )
    async def by_key(
        self, request: Request[Any, Any, Any], account_id: str, idempotency_key: RequestKey
    ) -> Response[Hold]:
        return await by_key(request, account_id, idempotency_key)
