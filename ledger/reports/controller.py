"""HTTP shape of the reports domain: statements (JSON or streamed CSV) and revenue.

Format: `?format=csv|json` wins; otherwise `Accept: text/csv` asks for CSV; JSON by
default. Readable by every admin role (viewer and up).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, get
from litestar.params import Parameter
from litestar.response import Stream

from ledger.errors import ValidationFailed
from ledger.http.auth import admin_guard
from ledger.http.query import utc
from ledger.openapi import SECURITY
from ledger.openapi.responses import GUARDED, csv_or_json, refusals
from ledger.reports.repository import GroupBy
from ledger.reports.service import ReportService, revenue_csv

# Timestamps are taken as text and parsed here, so that a bad one is a 422 naming the
# query parameter as the caller wrote it (`from`, a Python keyword, cannot be an argument).
From = Annotated[
    str | None,
    Parameter(query="from", default=None, max_length=64, description="inclusive; ISO 8601, naive = UTC"),
]
To = Annotated[
    str | None, Parameter(query="to", default=None, max_length=64, description="exclusive; default now")
]
Format = Annotated[Literal["json", "csv"] | None, Parameter(query="format", default=None)]
CSV = "text/csv; charset=utf-8"


def service(request: Request[Any, Any, Any]) -> ReportService:
    svc: ReportService = request.app.state.reports
    return svc


def wants_csv(request: Request[Any, Any, Any], fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "csv"
    return "text/csv" in request.headers.get("accept", "")


def timestamp(value: str | None, param: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as error:
        raise ValidationFailed(f"{param} is not an ISO 8601 timestamp", param=param) from error
    return utc(parsed, param=param)


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
        start, end = timestamp(start_text, "from"), timestamp(end_text, "to")
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
        summary="Revenue for [from, to) by model, account or day (JSON or CSV)",
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
            start=timestamp(start_text, "from"),
            end=timestamp(end_text, "to"),
        )
        if wants_csv(request, fmt):
            return Response(revenue_csv(report), media_type=CSV)
        return Response(report)
