"""From an authenticated request to the Actor that services record."""

from __future__ import annotations

from typing import Any

from litestar import Request

from ledger.context import Actor
from ledger.http.auth import principal_of


def actor_of(request: Request[Any, Any, Any]) -> Actor:
    principal = principal_of(request)
    return Actor(
        identity=principal.identity,
        role=principal.role,
        request_id=request.scope["state"].get("request_id"),
    )
