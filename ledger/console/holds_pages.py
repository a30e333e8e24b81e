"""The hold pages: every hold newest first (by state, by account), and one hold in full.

A hold's page shows its full id, its timeline (created; each journal transaction that
carries its id: reserve, settle, release, true-up; interrupted; resolved, by whom and
why), the pinned price version, the usage as the gateway sent it, the charge lines,
and what was released or charged above the hold. Unresolved holds have no charge,
release or resolver yet, so their table leaves those columns out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import Controller, Request, get
from litestar.params import Parameter
from litestar.response import Template

from ledger.console import repository
from ledger.console.auth import console_guard
from ledger.console.rendering import HANDLERS, PAGE, holds_of, page
from ledger.db import read_only
from ledger.errors import ValidationFailed
from ledger.holds.views import hold_id_of
from ledger.holds.views import view as hold_view
from ledger.http.query import Cursor
from ledger.ids import parse_uuid
from ledger.schemas import iso
from pricing.money import format_amount

HoldState = Literal["open", "interrupted", "settled", "released"]
StateFilter = Annotated[HoldState | Literal["unresolved"] | None, Parameter(query="state", default=None)]
UNRESOLVED = ("open", "interrupted")


def flat_usage(usage: dict[str, Any] | None, prefix: str = "") -> list[tuple[str, Any]]:
    """The usage object's counts as (dotted name, value) rows, nested details flattened."""
    rows: list[tuple[str, Any]] = []
    for name, value in (usage or {}).items():
        if isinstance(value, dict):
            rows.extend(flat_usage(value, f"{prefix}{name}."))
        else:
            rows.append((f"{prefix}{name}", value))
    return rows


class HoldPages(Controller):
    path = "/console"
    guards = [console_guard]
    include_in_schema = False
    exception_handlers = HANDLERS
    opt = {"body": "form"}

    @get("/holds")
    async def holds(
        self,
        request: Request[Any, Any, Any],
        hold_state: Annotated[
            HoldState | Literal["unresolved"] | None, Parameter(query="state", default=None)
        ],
        account_id: Annotated[str | None, Parameter(default=None, max_length=128)],
        cursor: Cursor,
    ) -> Template:
        before = parse_uuid(cursor) if cursor else None
        if cursor and before is None:
            raise ValidationFailed("cursor is not one this console issued", param="cursor")
        states: tuple[str, ...] = (
            UNRESOLVED if hold_state == "unresolved" else (hold_state,) if hold_state else ()
        )
        async with read_only(holds_of(request).reads) as conn:
            rows = await repository.holds(
                conn, states=states, account_id=account_id or None, before=before, limit=PAGE + 1
            )
        more = len(rows) > PAGE
        rows = rows[:PAGE]
        return page(
            request,
            "holds.html",
            holds=[hold_view(r) for r in rows],
            state=hold_state,
            unresolved_only=bool(states) and set(states) <= set(UNRESOLVED),
            account_id=account_id or "",
            next_cursor=str(rows[-1].id) if more and rows else None,
        )

    @get("/holds/{hold_ref:str}")
    async def hold(self, request: Request[Any, Any, Any], hold_ref: str) -> Template:
        hold = await holds_of(request).get(hold_ref)
        async with read_only(holds_of(request).reads) as conn:
            moves = await repository.hold_transactions(conn, hold_id_of(hold.id), hold.account_id)
        # Events of one moment (a settle's transaction and the resolution share their
        # database transaction's time) keep their causal order: rank, then transaction id.
        timeline: list[dict[str, Any]] = [
            {
                "at": hold.created_at,
                "rank": 0,
                "what": "created",
                "detail": f"reserved {hold.amount} {hold.currency}",
            }
        ]
        timeline += [
            {
                "at": iso(m.created_at),
                "rank": 1,
                "what": m.kind,
                "transaction": m.id,
                "amount": format_amount(m.amount),
                "held_change": format_amount(m.held_change),
                "by": m.actor,
                "detail": m.reason or "",
            }
            for m in moves
        ]
        if hold.interrupted_at:
            timeline.append(
                {"at": hold.interrupted_at, "rank": 2, "what": "interrupted", "detail": "stream broke"}
            )
        if hold.usage and hold.state in UNRESOLVED:
            timeline.append(
                {"at": hold.updated_at, "rank": 2, "what": "last usage recorded", "detail": "checkpoint"}
            )
        if hold.resolved_at:
            timeline.append(
                {
                    "at": hold.resolved_at,
                    "rank": 3,
                    "what": f"resolved: {hold.state}",
                    "by": hold.resolved_by,
                    "detail": hold.resolved_reason or "",
                }
            )
        timeline.sort(key=lambda e: (datetime.fromisoformat(e["at"]), e["rank"], e.get("transaction") or 0))
        return page(
            request,
            "hold.html",
            hold=hold,
            timeline=timeline,
            usage=flat_usage(hold.usage),
            lines=(hold.charge or {}).get("lines") or [],
        )
