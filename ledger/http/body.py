"""Strict JSON request bodies.

Litestar converts request data with msgspec in lax mode (so "100" would become 100
for an integer field). Money and limits deserve better: every body is decoded here
with msgspec's strict rules against its frozen Struct, unknown fields refused where
the Struct says so. Malformed JSON is 400 `invalid_json`; a well-formed body of the
wrong shape is 422 `validation_error` naming the field in `param`.

Handlers still declare `data: <Struct>` so that Litestar documents the body in the
OpenAPI schema (its own lax pass accepts everything the strict pass does); the
strict decode here is the one the handler uses.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
from litestar import Request

from ledger.errors import InvalidJson, ValidationFailed

T = TypeVar("T")

_AT = re.compile(r" - at `\$((?:\.[A-Za-z0-9_]+|\[\d+\])*)`$")
_FIELD = re.compile(r"(?:unknown|missing required) field `([^`]+)`")


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


def decode(raw: bytes, kind: type[T], *, optional: bool = False) -> T:
    if not raw.strip():
        if optional:
            return kind()
        raise InvalidJson("request body is empty; a JSON object is required")
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as error:
        param, message = validation_param(str(error))
        raise ValidationFailed(message, param=param) from error
    except msgspec.DecodeError as error:
        raise InvalidJson(f"request body is not valid JSON: {error}") from error


async def read(request: Request[Any, Any, Any], kind: type[T], *, optional: bool = False) -> T:
    return decode(await request.body(), kind, optional=optional)
