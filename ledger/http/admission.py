"""What every request must satisfy before its handler (or Litestar's parameter parsing) runs.

`admit` is the application's one `before_request` hook, so every route handler,
current and future, gets it (a test checks that no layer replaces it). It runs after
the auth guards, so an unauthenticated caller is 401 before anything is parsed.

- Query string: every key must be a parameter the handler declares (else 422
  naming it in `param`), given once unless the handler declares a list, and no key
  or value may hold U+0000. Finance staff must never believe they filtered when
  the service ignored the filter.
- Path parameters: no U+0000 (PostgreSQL cannot store or compare it in `text`).
- Body (POST, PUT, PATCH, DELETE): a non-empty body must declare a JSON media type
  (`application/json`, with parameters such as `; charset=utf-8`, or
  `application/*+json`), else 415; then `ledger.http.body.screen` refuses duplicate
  keys, excessive nesting and NUL characters. An empty body needs no content type
  (release, run a reconciliation). A body over the size limit is 413 while being read.
  Handlers with `opt={"body": "form"}` (the finance console's HTML forms) take
  `application/x-www-form-urlencoded` instead, with the same refusal of U+0000.
- Writes while the database has no synchronous standby and LEDGER_REQUIRE_SYNC_STANDBY
  is on (`ledger.replication`): every POST, PUT, PATCH and DELETE is 503
  `database_degraded`, except the quotes (they price, they move nothing) and the
  console's login and logout. Reads are served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from litestar import Request
from litestar.handlers.base import BaseRouteHandler

from ledger.errors import UnsupportedMediaType, ValidationFailed
from ledger.http.body import SCREENED, screen

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class DeclaredQuery:
    names: frozenset[str]  # the keys as sent (`from`, `state`)
    repeatable: frozenset[str]  # declared as a list
    alias: dict[str, str]  # Python parameter name -> key as sent (`since` -> `from`)


# handler id -> (handler, what it declares); the handler is kept so an id is never reused
_DECLARED: dict[int, tuple[BaseRouteHandler, DeclaredQuery]] = {}


def declared_query(handler: BaseRouteHandler, path_params: set[str]) -> DeclaredQuery:
    """The query keys a handler declares, from Litestar's own kwargs model (cached per handler)."""
    cached = _DECLARED.get(id(handler))
    if cached is None or cached[0] is not handler:
        # Only the path parameters' names matter here (they are not query keys).
        by_name: dict[str, Any] = dict.fromkeys(path_params)
        model = handler.create_kwargs_model(path_parameters=by_name)
        params = model.expected_query_params  # dependencies' parameters are merged in by Litestar
        declared = DeclaredQuery(
            names=frozenset(p.field_alias for p in params),
            repeatable=frozenset(p.field_alias for p in params if p.is_sequence),
            alias={p.field_name: p.field_alias for p in params},
        )
        cached = (handler, declared)
        _DECLARED[id(handler)] = cached
    return cached[1]


def query_key(request: Request[Any, Any, Any], field_name: str) -> str:
    """The query key a Litestar validation error means: `since` is sent as `from`."""
    handler = request.scope.get("route_handler")
    if not isinstance(handler, BaseRouteHandler):
        return field_name
    return declared_query(handler, set(request.path_params)).alias.get(field_name, field_name)


def is_json_media_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json":
        return True
    kind, _, subtype = media.partition("/")
    return kind == "application" and subtype.endswith("+json") and len(subtype) > len("+json")


def check_query(request: Request[Any, Any, Any]) -> None:
    declared = declared_query(request.route_handler, set(request.path_params))
    for key, values in request.query_params.dict().items():
        if "\x00" in key:
            raise ValidationFailed("a query parameter name contains a NUL character", param=None)
        if key not in declared.names:
            known = ", ".join(sorted(declared.names)) or "none"
            raise ValidationFailed(f"unknown query parameter {key!r} (this route takes: {known})", param=key)
        if len(values) > 1 and key not in declared.repeatable:
            raise ValidationFailed(f"query parameter {key!r} is given more than once", param=key)
        if any("\x00" in value for value in values):
            raise ValidationFailed(f"query parameter {key!r} contains a NUL character", param=key)


def check_path(request: Request[Any, Any, Any]) -> None:
    for name, value in request.path_params.items():
        if isinstance(value, str) and "\x00" in value:
            raise ValidationFailed(f"path parameter {name!r} contains a NUL character", param=name)


async def check_body(request: Request[Any, Any, Any]) -> None:
    if request.method not in _BODY_METHODS:
        return
    raw = await request.body()  # 413 here when over the limit
    if not raw.strip():
        return
    content_type = request.headers.get("content-type", "")
    if request.route_handler.opt.get("body") == "form":
        check_form(raw, content_type)
        return
    if not is_json_media_type(content_type):
        shown = content_type or "none"
        raise UnsupportedMediaType(
            f"a request body must be JSON with Content-Type: application/json (got {shown})"
        )
    screen(raw)
    request.scope["state"][SCREENED] = True


FORM = "application/x-www-form-urlencoded"


def check_form(raw: bytes, content_type: str) -> None:
    """An HTML form body: url-encoded, and no U+0000 in any name or value."""
    if content_type.split(";", 1)[0].strip().lower() != FORM:
        raise UnsupportedMediaType(f"a form body must be {FORM} (got {content_type or 'none'})")
    try:
        fields = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError) as error:
        raise ValidationFailed("the form body is not valid url-encoded UTF-8", param=None) from error
    for name, value in fields:
        if "\x00" in name or "\x00" in value:
            raise ValidationFailed(
                f"form field {name.replace(chr(0), '')!r} contains a NUL character",
                param=name.replace(chr(0), ""),
            )


async def admit(request: Request[Any, Any, Any]) -> None:
    """The `before_request` hook: refuse what no handler should ever see. Returns None to proceed."""
    check_query(request)
    check_path(request)
    await check_body(request)
    check_degraded(request)


_NOT_WRITES = ("/quotes", "/console/login", "/console/logout")


def check_degraded(request: Request[Any, Any, Any]) -> None:
    """A write while a required synchronous standby is missing is 503 `database_degraded`."""
    if request.method in _BODY_METHODS and not request.url.path.endswith(_NOT_WRITES):
        request.app.state.replication.require()
