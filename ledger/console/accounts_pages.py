"""The account pages: search, one account (balances, grants, usage, holds, money forms), statement.

Money forms (deposit, adjustment, grant) need `finance`, a CSRF token and a reason, and
go through the same services as the admin API (`AccountService.deposit` / `.adjust`,
`GrantService.grant`), so they are idempotency-checked and audit-logged the same way:
each rendered form carries its own idempotency key, so submitting it twice posts once.

An account's usage (last 30 UTC days, by model and charted by day) is what its settles
and true-ups took from its balance, from the journal, exact; tokens are the gateway's.

Transaction lists hide `reserve` and `release` rows unless asked (`?reserves=1`, or
those kinds ticked): they move only `held`, never the balance. The statement's CSV
download carries the page's filters and the moment the page was read (`as_of`), so it
holds exactly the page's rows (all pages of them), with exact amounts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated, Any
from urllib.parse import urlencode

import msgspec
from litestar import Controller, Request, get, post
from litestar.params import Parameter
from litestar.response import Stream, Template

from ledger.accounts.schemas import AdjustmentRequest, DepositRequest, JournalTransaction
from ledger.accounts.views import account_view, journal_view
from ledger.console import repository
from ledger.console.auth import checked_form, console_guard
from ledger.console.chart import bar_chart
from ledger.console.rendering import (
    HANDLERS,
    PAGE,
    FromDay,
    ToDay,
    accounts_of,
    day,
    grants_of,
    page,
    period,
    reports_of,
)
from ledger.db import read_only
from ledger.errors import LedgerError, ValidationFailed
from ledger.grants.schemas import PAID, PROMOTIONAL, GrantRequest
from ledger.grants.service import grant_view
from ledger.holds.views import view as hold_view
from ledger.http.body import validation_param
from ledger.http.query import Cursor, timestamp
from ledger.http.request import actor_of
from ledger.reports.service import BEGINNING
from ledger.schemas import iso
from pricing.money import EXACT, format_amount

Search = Annotated[str, Parameter(default="", max_length=128)]
Kinds = Annotated[list[str] | None, Parameter(query="kind", default=None)]
Reserves = Annotated[bool, Parameter(default=False)]
AsOf = Annotated[str | None, Parameter(query="as_of", default=None, max_length=40)]
HOLD_ONLY = ("reserve", "release")
RECENT = 10
USAGE_DAYS = 30


def usage_points(by_day: Sequence[Any], today: date) -> list[tuple[str, Decimal]]:
    """A chart slot for each of the last USAGE_DAYS days, empty days included."""
    spent = {r.key: r.spent for r in by_day}
    days = [(today - timedelta(days=n)).isoformat() for n in range(USAGE_DAYS - 1, -1, -1)]
    return [(d, spent.get(d, Decimal(0))) for d in days]


def chosen_kinds(kinds: list[str] | None, reserves: bool) -> tuple[str, ...]:
    """The kinds ticked (in the journal's order); none ticked: all but reserve/release unless asked."""
    if kinds:
        unknown = sorted(set(kinds) - set(repository.KINDS))
        if unknown:
            raise ValidationFailed(f"unknown transaction kind {unknown[0]!r}", param="kind")
        return tuple(k for k in repository.KINDS if k in kinds)
    return repository.KINDS if reserves else tuple(k for k in repository.KINDS if k not in HOLD_ONLY)


def transaction_views(account_id: str, rows: Sequence[Any]) -> list[JournalTransaction]:
    """The account's transactions as the API shows them, without their entries."""
    return [journal_view(account_id, r, []) for r in rows]


def before_of(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 18:
        raise ValidationFailed("cursor is not one this console issued", param="cursor")
    return int(cursor)


class AccountPages(Controller):
    path = "/console"
    guards = [console_guard]
    include_in_schema = False
    exception_handlers = HANDLERS
    opt = {"body": "form"}  # HTML forms: the admission check takes form bodies here

    @get("/accounts")
    async def accounts(self, request: Request[Any, Any, Any], q: Search, cursor: Cursor) -> Template:
        query = q.strip()
        async with read_only(accounts_of(request).engine) as conn:
            rows = await repository.search(conn, query=query, after=cursor or "", limit=PAGE + 1)
        more = len(rows) > PAGE
        rows = rows[:PAGE]
        return page(
            request,
            "accounts.html",
            accounts=[account_view(r) for r in rows],
            q=query,
            next_cursor=rows[-1].id if more and rows else None,
        )

    @get("/accounts/{account_id:str}")
    async def account(self, request: Request[Any, Any, Any], account_id: str, reserves: Reserves) -> Template:
        return await self._account_page(request, account_id, reserves=reserves)

    async def _account_page(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        *,
        reserves: bool = False,
        notice: tuple[str, str] | None = None,
        status: int = 200,
        values: dict[str, str] | None = None,
    ) -> Template:
        account = await accounts_of(request).get(account_id)
        kinds = chosen_kinds(None, reserves)
        today = datetime.now(UTC).date()
        async with read_only(accounts_of(request).engine) as conn:
            held = await repository.holds(
                conn, states=("open", "interrupted"), account_id=account_id, before=None, limit=PAGE
            )
            grants = await repository.grants(conn, account_id, limit=PAGE)
            since = datetime.combine(today - timedelta(days=USAGE_DAYS - 1), time(), tzinfo=UTC)
            until = datetime.combine(today + timedelta(days=1), time(), tzinfo=UTC)
            by_model = await repository.usage(conn, account_id, group_by="model", since=since, until=until)
            by_day = await repository.usage(conn, account_id, group_by="day", since=since, until=until)
            recent = await repository.transactions(
                conn,
                account_id,
                kinds=kinds,
                since=BEGINNING,
                until=datetime.max.replace(tzinfo=UTC),
                before=None,
                limit=RECENT,
            )
        return page(
            request,
            "account.html",
            status,
            account=account,
            holds=[hold_view(r) for r in held],
            grants=[grant_view(r) for r in grants],
            recent=transaction_views(account_id, recent),
            usage_models=by_model,
            usage_total=sum((r.spent for r in by_model), Decimal(0)),
            usage_chart=bar_chart(
                usage_points(by_day, today),
                title=f"Spent per day, last {USAGE_DAYS} days",
                currency=account.currency,
                tick=lambda d: d[5:],
                width=600,
                labels=8,
            ),
            reserves=reserves,
            notice=notice,
            values=values or {},
            # A fresh key per render: the same rendered form submitted twice is one movement.
            deposit_key=f"console-{uuid.uuid4().hex}",
            adjust_key=f"console-{uuid.uuid4().hex}",
            grant_key=f"console-{uuid.uuid4().hex}",
        )

    # --- statement ---------------------------------------------------------------------

    @get("/accounts/{account_id:str}/statement")
    async def statement(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        start: FromDay,
        end: ToDay,
        kind: Kinds,
        reserves: Reserves,
        cursor: Cursor,
    ) -> Template:
        read_at = datetime.now(UTC)
        kinds = chosen_kinds(kind, reserves)
        since, until = period(start, end)
        account = await accounts_of(request).get(account_id)
        head = await reports_of(request).summary(account_id, since, until)
        async with read_only(accounts_of(request).engine) as conn:
            rows = await repository.transactions(
                conn,
                account_id,
                kinds=kinds,
                since=since or BEGINNING,
                until=head.end,
                before=before_of(cursor),
                limit=PAGE + 1,
            )
        more = len(rows) > PAGE
        rows = rows[:PAGE]
        filters = [f for f in [("from", start or ""), ("to", end or "")] if f[1]]
        filters += [("kind", k) for k in kind or ()]
        base = urlencode(filters)  # the filters without the reserve/release toggle
        if reserves and not kind:
            filters.append(("reserves", "1"))
        view = urlencode(filters)
        return page(
            request,
            "statement.html",
            account=account,
            head=head,
            totals_net=format_amount(EXACT.subtract(head.closing_balance, head.opening_balance)),
            kinds=kinds,
            all_kinds=repository.KINDS,
            explicit=bool(kind),
            reserves=reserves,
            start=start or "",
            end=end or "",
            view=view,
            hide_reserves=base,
            show_reserves=urlencode([*filters, ("reserves", "1")]) if not reserves else view,
            # The CSV holds this page's rows: up to the end of the period or, for a period that
            # has not ended, the moment the page was read (money that moves later is not in it).
            csv_query=urlencode([*filters, ("as_of", iso(min(head.end, read_at)))]),
            rows=transaction_views(account_id, rows),
            next_cursor=str(rows[-1].id) if more and rows else None,
            first_page=cursor is None,
        )

    @get("/accounts/{account_id:str}/statement.csv")
    async def statement_csv(
        self,
        request: Request[Any, Any, Any],
        account_id: str,
        start: FromDay,
        end: ToDay,
        kind: Kinds,
        reserves: Reserves,
        as_of: AsOf,
    ) -> Stream:
        """The statement page's rows as the admin API's statement CSV: same filters, same moment."""
        kinds = chosen_kinds(kind, reserves)
        since, until = period(start, end)
        moment = timestamp(as_of, param="as_of")
        if moment is not None and (until is None or moment < until):
            until = moment
        reports = reports_of(request)
        await reports.check_statement(account_id, since, until)
        return Stream(
            reports.statement_csv(account_id, since, until, kinds=frozenset(kinds)),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="statement-{account_id}.csv"'},
        )

    # --- money forms -------------------------------------------------------------------

    @post("/accounts/{account_id:str}/deposits", opt={"role": "finance"}, status_code=200)
    async def deposit(self, request: Request[Any, Any, Any], account_id: str) -> Template:
        return await self._move(request, account_id, "deposit")

    @post("/accounts/{account_id:str}/adjustments", opt={"role": "finance"}, status_code=200)
    async def adjust(self, request: Request[Any, Any, Any], account_id: str) -> Template:
        return await self._move(request, account_id, "adjustment")

    @post("/accounts/{account_id:str}/grants", opt={"role": "finance"}, status_code=200)
    async def grant(self, request: Request[Any, Any, Any], account_id: str) -> Template:
        return await self._move(request, account_id, "grant")

    async def _move(self, request: Request[Any, Any, Any], account_id: str, kind: str) -> Template:
        form = await checked_form(request)
        values = {
            name: str(form.get(name) or "").strip()
            for name in ("amount", "reason", "reference", "expires_on", "credit")
        }
        values["kind"] = kind
        key = str(form.get("idempotency_key") or "")
        try:
            if not values["reason"]:
                raise ValidationFailed("a reason is required", param="reason")
            text = await self._post(request, account_id, kind, key, values)
        except LedgerError as error:
            if error.status >= 500 or error.status == 404:
                raise
            return await self._account_page(
                request, account_id, notice=("error", error.message), status=error.status, values=values
            )
        return await self._account_page(request, account_id, notice=("ok", text))

    async def _post(
        self, request: Request[Any, Any, Any], account_id: str, kind: str, key: str, values: dict[str, str]
    ) -> str:
        accounts = accounts_of(request)
        fields = {"idempotency_key": key, "amount": values["amount"]}
        try:
            if kind == "grant":
                expires = day(values["expires_on"], param="expires_at")
                if expires is None:
                    raise ValidationFailed("an expiry day is required", param="expires_at")
                body = msgspec.convert(
                    {
                        **fields,
                        "reason": values["reason"],
                        "reference": values["reference"] or None,
                        "expires_at": f"{expires.isoformat()}T00:00:00Z",
                        "priority": PAID if values["credit"] == "paid" else PROMOTIONAL,
                    },
                    GrantRequest,
                )
                grant, created = await grants_of(request).grant(account_id, body, actor_of(request))
                if not created:
                    return (
                        f"This form was already submitted: grant {grant.grant_id} of {grant.amount} "
                        f"{grant.currency} stands, nothing was granted twice."
                    )
                return (
                    f"Grant of {grant.amount} {grant.currency} posted (grant {grant.grant_id}), "
                    f"expires {grant.expires_at}."
                )
            if kind == "deposit":
                deposit = msgspec.convert({**fields, "reference": values["reason"]}, DepositRequest)
                movement, created = await accounts.deposit(account_id, deposit, actor_of(request))
            else:
                adjustment = msgspec.convert({**fields, "reason": values["reason"]}, AdjustmentRequest)
                movement, created = await accounts.adjust(account_id, adjustment, actor_of(request))
        except msgspec.ValidationError as error:
            param, message = validation_param(str(error))
            raise ValidationFailed(message, param=param) from error
        if created:
            return (
                f"{kind.capitalize()} of {movement.amount} {movement.currency} posted "
                f"(transaction {movement.transaction_id}); balance now {movement.balance}."
            )
        return (
            f"This form was already submitted: {kind} {movement.transaction_id} of "
            f"{movement.amount} {movement.currency} stands, nothing was posted twice."
        )
