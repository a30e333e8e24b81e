"""The revenue page: what settles and true-ups earned, by day (charted) and by model.

Read from `ReportService.revenue`, the same report as `GET /admin/v1/reports/revenue`,
so the page's totals are the API's. The period is UTC days, both ends included,
defaulting to the last 30 days including today; days without revenue are drawn as
empty slots so the chart's x axis is time. Its CSV download is the API's revenue CSV.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, get
from litestar.params import Parameter
from litestar.response import Template

from ledger.console.auth import console_guard
from ledger.console.chart import bar_chart
from ledger.console.rendering import HANDLERS, FromDay, ToDay, page, period, reports_of
from ledger.reports.service import revenue_csv

Currency = Annotated[str, Parameter(default="USD", pattern=r"^[A-Z]{3}$")]
DEFAULT_DAYS = 30
MAX_CHART_DAYS = 400


def days_between(first: date, last: date) -> list[str]:
    count = (last - first).days + 1
    return [(first + timedelta(days=i)).isoformat() for i in range(count)]


class RevenuePages(Controller):
    path = "/console"
    guards = [console_guard]
    include_in_schema = False
    exception_handlers = HANDLERS
    opt = {"body": "form"}

    @get("/revenue")
    async def revenue(
        self, request: Request[Any, Any, Any], start: FromDay, end: ToDay, currency: Currency
    ) -> Template:
        today = datetime.now(UTC).date()
        start = start or (today - timedelta(days=DEFAULT_DAYS - 1)).isoformat()
        end = end or today.isoformat()
        since, until = period(start, end)
        reports = reports_of(request)
        by_model = await reports.revenue(currency=currency, group_by="model", start=since, end=until)
        by_day = await reports.revenue(currency=currency, group_by="day", start=since, end=until)
        earned = {g.key: Decimal(g.amount) for g in by_day.groups}
        first, last = date.fromisoformat(start), date.fromisoformat(end)
        if (last - first).days < MAX_CHART_DAYS:
            points = [(d, earned.get(d, Decimal(0))) for d in days_between(first, last)]
        else:
            points = sorted(earned.items())
        return page(
            request,
            "revenue.html",
            currency=currency,
            start=start,
            end=end,
            by_model=by_model,
            by_day=by_day,
            day_chart=bar_chart(
                points, title=f"Revenue per day, {currency}", currency=currency, tick=lambda d: d[5:]
            ),
            model_chart=bar_chart(
                [(g.key, Decimal(g.amount)) for g in by_model.groups],
                title=f"Revenue per model, {currency}",
                currency=currency,
                width=600,
            ),
        )

    @get("/revenue.csv")
    async def revenue_download(
        self,
        request: Request[Any, Any, Any],
        start: FromDay,
        end: ToDay,
        currency: Currency,
        group_by: Annotated[Literal["model", "day", "account"], Parameter(default="day")],
    ) -> Response[str]:
        since, until = period(start, end)
        report = await reports_of(request).revenue(
            currency=currency, group_by=group_by, start=since, end=until
        )
        return Response(
            revenue_csv(report),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="revenue-{currency}-by-{group_by}.csv"'},
        )
