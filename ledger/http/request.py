"""From an authenticated request to the Actor that services record."""

from __future__ import annotations

from typing import Any

from litestar import Request

from ledger.context import Actor
from ledger.http.auth import Principal, principal_of


def actor_for(principal: Principal, request_id: str | None) -> Actor:
    return Actor(identity=principal.identity, role=principal.role, request_id=request_id)


def actor_of(request: Request[Any, Any, Any]) -> Actor:
    return actor_for(principal_of(request), request.scope["state"].get("request_id"))
