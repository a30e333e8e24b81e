"""HTTP shape of the reports domain: statements (JSON or streamed CSV) and revenue.

Format: `?format=csv|json` wins; otherwise `Accept: text/csv` asks for CSV; JSON by
default. Readable by every admin role (viewer and up).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, get
from litestar.params import Parameter
from litestar.response import Stream

from ledger.http.auth import admin_guard
from ledger.http.query import From, To, timestamp
from ledger.openapi import SECURITY
from ledger.openapi.responses import GUARDED, csv_or_json, refusals
from ledger.reports.repository import GroupBy
from ledger.reports.service import ReportService, revenue_csv
from ledger.reports.usage import UsageGroupBy, usage_csv, usage_report

Format = Annotated[Literal["json", "csv"] | None, Parameter(query="format", default=None)]
CSV = "text/csv"  # Litestar adds "; charset=utf-8" to a text type


def service(request: Request[Any, Any, Any]) -> ReportService:
    svc: ReportService = request.app.state.reports
    return svc


def wants_csv(request: Request[Any, Any, Any], fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "csv"
    return "text/csv" in request.headers.get("accept", "")


class AdminReportController(Controller):
    path = "/admin/v1"
    guards = [admin_guard]
    security = SECURITY
    tags = ["admin: reports"]

    @get(
        "/accounts/{account_id:str}/statement",
        summary="Statement for [from, to): opening, every entry, closing, totals by kind (JSON or CSV)",
        responses={**csv_or_json("the statement"), **refusals(GUARDED, 404)},
    )
    async def statement(
        self, request: Request[Any, Any, Any], account_id: str, start_text: From, end_text: To, fmt: Format
    ) -> Response[Any]:
        start, end = timestamp(start_text, param="from"), timestamp(end_text, param="to")
        reports = service(request)
        if not wants_csv(request, fmt):
            return Response(await reports.statement(account_id, start, end))
        await reports.check_statement(account_id, start, end)
        return Stream(
            reports.statement_csv(account_id, start, end),
            media_type=CSV,
            headers={"Content-Disposition": f'attachment; filename="statement-{account_id}.csv"'},
        )

    @get(
        "/reports/revenue",
        summary="Revenue for [from, to) by model, account, day or the holds' price plan (JSON or CSV)",
        responses={**csv_or_json("the revenue report"), **refusals(GUARDED)},
    )
    async def revenue(
        self,
        request: Request[Any, Any, Any],
        start_text: From,
        end_text: To,
        fmt: Format,
        group_by: Annotated[GroupBy, Parameter(default="model")],
        currency: Annotated[str, Parameter(default="USD", pattern=r"^[A-Z]{3}$")],
    ) -> Response[Any]:
        report = await service(request).revenue(
            currency=currency,
            group_by=group_by,
            start=timestamp(start_text, param="from"),
            end=timestamp(end_text, param="to"),
        )
        if wants_csv(request, fmt):
            return Response(revenue_csv(report), media_type=CSV)
        return Response(report)

    @get(
        "/accounts/{account_id:str}/usage",
        summary="Usage for [from, to) by model, day or budget key: requests, tokens per category "
        "and cost, totalling the statement's charges (JSON or CSV)",
        responses={**csv_or_json("the usage report"), **refusals(GUARDED, 404)},
    )
    async def usage(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        start_text: From,
        end_text: To,
        fmt: Format,
        group_by: Annotated[UsageGroupBy, Parameter(default="model")],
    ) -> Response[Any]:
        report = await usage_report(
            service(request),
            account_id,
            group_by=group_by,
            start=timestamp(start_text, param="from"),
            end=timestamp(end_text, param="to"),
        )
        if wants_csv(request, fmt):
            return Response(
                usage_csv(report),
                media_type=CSV,
                headers={"Content-Disposition": f'attachment; filename="usage-{account_id}.csv"'},
            )
        return Response(report)
