"""HTTP shape of the alerts domain: one low-balance alert per account (admin surface)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, put
from litestar.params import Parameter

from ledger.alerts.schemas import Alert, AlertConfig
from ledger.alerts.service import AlertService
from ledger.http.auth import admin_guard
from ledger.http.body import read
from ledger.http.query import IdCursor, Limit
from ledger.http.request import actor_of
from ledger.openapi import SECURITY
from ledger.openapi.responses import BODY, GUARDED, refusals
from ledger.pagination import id_cursor
from ledger.schemas import NOT_BLANK, Page

# Roles that see a delivery attempt's status code and error: the error tells a refused
# connection from a timeout from an HTTP status, which to a viewer would be a port scanner.
DETAIL_ROLES = frozenset({"finance", "admin"})
NOT_FOUND = {404: "`account_not_found`: no such account; `alert_not_found`: the account has no alert"}


def service(request: Request[Any, Any, Any]) -> AlertService:
    svc: AlertService = request.app.state.alerts
    return svc


class AdminAlertController(Controller):
    path = "/admin/v1/accounts/{account_id:str}/alert"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: alerts"]

    @put(
        "/",
        opt={"role": "finance"},
        summary="Set the low-balance alert: a webhook when available crosses the threshold (with reason)",
        description="`webhook_url` is https (http only with LEDGER_WEBHOOK_ALLOW_HTTP); every address "
        "its host resolves to must be public or inside LEDGER_WEBHOOK_ALLOWED_NETWORKS (loopback, "
        "private, link-local, CGNAT, multicast, reserved and unspecified addresses are 422 `webhook_url`). "
        "It is called by the delivery worker, which checks it again before each attempt and connects "
        "to the address it checked; never at configuration time. Replaces any alert the account had.",
        responses=refusals(GUARDED, BODY, 404, notes=NOT_FOUND),
    )
    async def configure(self, request: Request[Any, Any, Any], account_id: str, data: AlertConfig) -> Alert:
        data = await read(request, AlertConfig)
        return await service(request).configure(account_id, data, actor_of(request))

    @get("/", summary="The account's low-balance alert", responses=refusals(GUARDED, 404, notes=NOT_FOUND))
    async def get_alert(self, request: Request[Any, Any, Any], account_id: str) -> Alert:
        return await service(request).get(account_id)

    @delete(
        "/",
        opt={"role": "finance"},
        summary="Remove the alert (its undelivered events are cancelled)",
        responses=refusals(GUARDED, 404, notes=NOT_FOUND),
    )
    async def remove(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        reason: Annotated[
            str,
            Parameter(
                min_length=1,
                max_length=2000,
                schema_extra={"pattern": NOT_BLANK},  # not only white space (the service checks it)
                description="why (required, audit-logged)",
            ),
        ],
    ) -> None:
        await service(request).remove(account_id, reason, actor_of(request))

    @get(
        "/events",
        summary="Recorded crossings, newest first, each with its delivery attempts",
        description="Each attempt's `status_code` and `error` are shown to finance and admin; "
        "for a viewer they are null (an attempt shows only whether it was `delivered`).",
        responses=refusals(GUARDED, 404, notes={404: "`account_not_found`"}),
    )
    async def events(
        self, request: Request[Any, Any, Any], account_id: str, limit: Limit, cursor: IdCursor
    ) -> Page:
        detail = actor_of(request).role in DETAIL_ROLES
        return await service(request).events(account_id, before=id_cursor(cursor), limit=limit, detail=detail)
