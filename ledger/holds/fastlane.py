"""The gateway's three hot calls, served ahead of the framework.

Reserve (`POST /v1/holds`), settle (`POST /v1/holds/{id}/settle`) and release
(`POST /v1/holds/{id}/release`) are the billing cost of every model request. Through
Litestar each pays for routing, a `Request`, the guard (Litestar copies the handler
for each guard), the `before_request` hook, a signature model and a `Response`.
`FastLane` is the app's
`asgi_handler` (in front of Litestar's router) and serves those calls itself when,
and only when, the framework's answer would be to run the handler:

- POST on the exact path (no trailing slash, no root path), no query string;
- no repeated Authorization, Content-Type, Content-Length, Host or Idempotency-Key
  header, and a Host header (if any) that Litestar accepts;
- a client address that the auth throttle does not refuse (`ledger.http.throttle`),
  and a known gateway token, sent exactly as `Bearer <token>`;
- a body within `LEDGER_MAX_BODY_BYTES`: for reserve and settle, declared JSON,
  screened (`ledger.http.body.screen`: duplicate keys, depth, NUL) and decoded
  strictly into the handler's Struct, with the idempotency key resolved (reserve);
  for release, empty.

Every other request (each refusal the framework gives before the handler: 401, 403,
400, 413, 415, 422; an unusual header) is handed to the framework unchanged, with the
body already read replayed, so each refusal and each edge case has one
implementation. An admitted request calls the same service method as the controller,
is answered with the same JSON encoding and error translation
(`ledger.http.errors.refusal`), and is logged and counted by the same helpers as
`ledger.http.middleware`, under the same route templates.
`ledger_fast_lane_requests_total{route, outcome}` counts what it served and what it
handed on. `LEDGER_FAST_LANE=0` turns it off.
"""

from __future__ import annotations

from typing import Any

import msgspec
import structlog
from litestar import Litestar
from litestar._asgi.utils import is_valid_host
from litestar.types import ASGIApp, Receive, Scope, Send

from ledger.errors import LedgerError
from ledger.holds.schemas import ReserveBody, ReserveRequest, UsageRequest
from ledger.http.admission import is_json_media_type
from ledger.http.auth import Principal, authenticate
from ledger.http.body import decode
from ledger.http.errors import error_body, refusal
from ledger.http.idempotency_key import with_key
from ledger.http.middleware import REQUEST_ID, begin, finish, request_id_from
from ledger.http.request import actor_for
from ledger.metrics import FAST_LANE
from ledger.prices.notices import sunset

# Route templates, as Litestar names them (the metrics' `route` label).
RESERVE = "/v1/holds"
SETTLE = "/v1/holds/{hold_id}/settle"
RELEASE = "/v1/holds/{hold_id}/release"
ROUTES = (RESERVE, SETTLE, RELEASE)

_HOLDS = "/v1/holds/"
_ACTIONS = {"settle": SETTLE, "release": RELEASE}
_WATCHED = frozenset({b"authorization", b"content-type", b"content-length", b"host", b"idempotency-key"})
_CONTENT_TYPE = (b"content-type", b"application/json")
_encode = msgspec.json.Encoder().encode


class _HandOff(Exception):
    """The framework answers this request (raised before anything is answered or logged)."""


class FastLane:
    def __init__(self, app: Litestar, framework: ASGIApp) -> None:
        self.app = app
        self.framework = framework
        self._served = {route: FAST_LANE.labels(route, "served") for route in ROUTES}
        self._handed = {route: FAST_LANE.labels(route, "handed_off") for route in ROUTES}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route, hold_id = _route(scope)
        if route is None:
            await self.framework(scope, receive, send)
            return
        chunks: list[bytes] = []
        try:
            await self._serve(scope, receive, send, route, hold_id, chunks)
        except _HandOff:
            self._handed[route].inc()
            await self.framework(scope, _replaying(chunks, receive), send)

    async def _serve(
        self,
        scope: Any,
        receive: Receive,
        send: Any,
        route: str,
        hold_id: str,
        chunks: list[bytes],
    ) -> None:
        seen: dict[bytes, bytes] = {}
        incoming_id = b""
        for name, value in scope["headers"]:
            if name == REQUEST_ID:
                incoming_id = value  # the last one, as the middleware reads it
            elif name in _WATCHED:
                if name in seen:
                    raise _HandOff
                seen[name] = value
        host = seen.get(b"host")
        if host is not None and not is_valid_host(host):
            raise _HandOff
        throttle = self.app.state.auth_throttle
        if throttle.blocked and throttle.retry_after(throttle.client_address(scope)) is not None:
            raise _HandOff  # 429: the guard's
        principal = self._principal(seen.get(b"authorization"))
        settings = self.app.state.settings
        raw = await _body(receive, seen.get(b"content-length"), settings.max_body_bytes, chunks)
        operation = _admit(route, raw, seen)

        request_id = request_id_from(incoming_id)
        started = begin(request_id)
        structlog.contextvars.bind_contextvars(actor=principal.identity)
        actor = actor_for(principal, request_id)
        status = 500
        try:
            try:
                self.app.state.replication.require()  # 503 database_degraded, as `admit` answers
                holds = self.app.state.holds
                if isinstance(operation, ReserveRequest):
                    hold, created = await holds.reserve(operation, actor)
                    status = 201 if created else 200
                elif isinstance(operation, UsageRequest):
                    hold = await holds.settle(hold_id, operation.usage, actor)
                    status = 200
                else:
                    hold = await holds.release(hold_id, actor)
                    status = 200
                payload = _encode(hold)
                deadline = sunset(hold.notice)  # the model's retirement, as the controller sends it
            except Exception as exc:
                error = refusal(exc, path=scope["path"], body_limit=settings.max_body_bytes)
                status = error.status
                payload = _encode(error_body(error))
                deadline = None
            self._served[route].inc()
            # Litestar's order: the handler's headers (Sunset), then its content type and
            # length, then the request id the middleware adds.
            headers = [] if deadline is None else [(b"sunset", deadline.encode("latin-1"))]
            headers += [
                _CONTENT_TYPE,
                (b"content-length", str(len(payload)).encode()),
                (REQUEST_ID, request_id.encode("latin-1")),
            ]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
        finally:
            finish("POST", route, status, started)

    def _principal(self, authorization: bytes | None) -> Principal:
        try:
            principal = authenticate(
                self.app.state.tokens, authorization.decode("latin-1") if authorization is not None else None
            )
        except LedgerError:
            raise _HandOff from None  # 401: the guard's
        if principal.surface != "gateway":
            raise _HandOff  # 403: the guard's
        return principal


def _route(scope: Any) -> tuple[str | None, str]:
    """The fast lane's route for this request, and the hold id in its path; None: not ours."""
    if (
        scope["type"] != "http"
        or scope["method"] != "POST"
        or scope.get("query_string")
        or scope.get("root_path")
    ):
        return None, ""
    path: str = scope["path"]
    if path == RESERVE:
        return RESERVE, ""
    if not path.startswith(_HOLDS):
        return None, ""
    hold_id, _, action = path[len(_HOLDS) :].partition("/")
    route = _ACTIONS.get(action)
    if route is None or not hold_id or "\x00" in hold_id:
        return None, ""
    return route, hold_id


async def _body(receive: Receive, declared: bytes | None, limit: int, chunks: list[bytes]) -> bytes:
    """The whole body, read into `chunks` (replayed if the request is handed off)."""
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise _HandOff  # the framework refuses it (413), nothing read
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _HandOff  # a disconnect: the framework sees it as it would have
        chunk = message.get("body", b"")
        if chunk:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _HandOff
        if not message.get("more_body", False):
            chunks.append(b"")  # marks the body complete
            return b"".join(chunks)


def _admit(route: str, raw: bytes, seen: dict[bytes, bytes]) -> ReserveRequest | UsageRequest | None:
    """The operation a clean request asks for; `_HandOff` for anything the framework refuses."""
    if route == RELEASE:
        if raw.strip():
            raise _HandOff  # a body on release is screened (and ignored) by the framework
        return None
    content_type = seen.get(b"content-type", b"").decode("latin-1")
    if not raw.strip() or not is_json_media_type(content_type):
        raise _HandOff
    try:
        if route == SETTLE:
            return decode(raw, UsageRequest)
        header = seen.get(b"idempotency-key")
        body = decode(raw, ReserveBody)
        return with_key(header.decode("latin-1") if header is not None else None, body, ReserveRequest)
    except Exception:
        raise _HandOff from None


def _replaying(chunks: list[bytes], receive: Receive) -> Receive:
    """`receive`, after first giving back what the fast lane already read of the body."""
    if not chunks:
        return receive
    complete = chunks[-1] == b""
    replayed = {"type": "http.request", "body": b"".join(chunks), "more_body": not complete}
    pending: list[dict[str, Any]] = [replayed]

    async def replay() -> Any:
        if pending:
            return pending.pop()
        return await receive()

    return replay
