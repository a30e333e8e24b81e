"""Strict JSON request bodies.

Two passes, both before any handler code sees a value:

1. `screen(raw)` (run for every request body by `ledger.http.admission`): the body
   must be one well-formed JSON document with no duplicate key in any object (a
   parser that lets the last key win would let `"amount":"1","amount":"1000000"`
   deposit a million), nested at most `MAX_DEPTH` levels, and without NaN or
   Infinity; such a body is 400 `invalid_json`. A string (key or value, at any depth)
   holding U+0000 is 422 `validation_error` naming its path in `param`: PostgreSQL
   cannot store NUL in `text` or `jsonb`, and nothing legitimate contains it.
2. `decode(raw, Struct)`: msgspec's strict rules against the handler's frozen Struct
   (Litestar's own conversion is lax, so "100" would become 100 for an integer
   field), unknown fields refused where the Struct says so. A well-formed body of
   the wrong shape is 422 `validation_error` naming the field in `param`. A body's
   `usage` object (kept with the hold as sent) is bounded by
   `ledger.schemas.check_usage`: 422 `usage_invalid`, param `usage`. It is measured
   only when the body is large enough to matter (`USAGE_FREE_BYTES`), so the gateway's
   usual settle pays nothing for it.

Handlers still declare `data: <Struct>` so that Litestar documents the body in the
OpenAPI schema (its own lax pass accepts everything the strict pass does); the
strict decode here is the one the handler uses.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import msgspec
from litestar import Request

from ledger.errors import InvalidJson, ValidationFailed
from ledger.schemas import MAX_USAGE_BYTES, check_usage

T = TypeVar("T")

# Deeper than any body this service reads (a price document is 4 levels deep,
# `metadata` is the caller's own) and far below any recursion limit.
MAX_DEPTH = 32

# A body this short cannot hold a usage over the limit: re-encoding decoded JSON grows it
# less than 5x (the worst is a short float such as 1e15, written out in full).
USAGE_FREE_BYTES = MAX_USAGE_BYTES // 8

# Set in the request's scope state once `screen` has passed its body (admission does it
# for every request), so `read` does not parse the body twice.
SCREENED = "ledger_body_screened"

_AT = re.compile(r" - at `\$((?:\.[A-Za-z0-9_]+|\[\d+\])*)`$")
_FIELD = re.compile(r"(?:unknown|missing required) field `([^`]+)`")


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _walk(tree: Any) -> None:
    """Depth and NUL check over the decoded tree, iteratively (no recursion to exhaust)."""
    stack: list[tuple[Any, str, int]] = [(tree, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_DEPTH:
                raise InvalidJson(f"request body is nested deeper than {MAX_DEPTH} levels")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, value in items:
                child = _path(path, key)
                if isinstance(key, str) and "\x00" in key:
                    raise ValidationFailed("a field name contains a NUL character (\\u0000)", param=child)
                stack.append((value, child, depth + 1))
        elif isinstance(node, str) and "\x00" in node:
            raise ValidationFailed("text must not contain a NUL character (\\u0000)", param=path or None)


def screen(raw: bytes) -> None:
    """Refuse a body that is not one clean JSON document (see the module docstring)."""
    try:
        tree = json.loads(raw, object_pairs_hook=_unique_object, parse_constant=_no_constant)
    except _Duplicate as error:
        raise InvalidJson(f"request body repeats the key {error.key!r}", param=error.key) from None
    except RecursionError:
        raise InvalidJson(f"request body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, huge integers
        raise InvalidJson(f"request body is not valid JSON: {error}") from None
    _walk(tree)


def validation_param(message: str) -> tuple[str | None, str]:
    path = ""
    text = message
    if m := _AT.search(message):
        path = m.group(1).lstrip(".")
        text = message[: m.start()]
    if m := _FIELD.search(text):
        name = m.group(1)
        return (f"{path}.{name}" if path else name), text
    return (path or None), text


def decode(raw: bytes, kind: type[T], *, optional: bool = False, screened: bool = False) -> T:
    if not raw.strip():
        if optional:
            return kind()
        raise InvalidJson("request body is empty; a JSON object is required")
    if not screened:
        screen(raw)
    try:
        value = msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as error:
        param, message = validation_param(str(error))
        raise ValidationFailed(message, param=param) from error
    except msgspec.DecodeError as error:
        raise InvalidJson(f"request body is not valid JSON: {error}") from error
    if len(raw) > USAGE_FREE_BYTES and "usage" in getattr(kind, "__struct_fields__", ()):
        check_usage(getattr(value, "usage"))  # noqa: B009 (`kind` is any Struct)
    return value


async def read(request: Request[Any, Any, Any], kind: type[T], *, optional: bool = False) -> T:
    screened = bool(request.scope["state"].get(SCREENED))
    return decode(await request.body(), kind, optional=optional, screened=screened)
