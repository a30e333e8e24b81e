"""The one error shape, for every failure the service can answer with.

    {"error": {"type": ..., "code": ..., "message": ..., "param": ...}}

Domain errors carry their own status and code; Litestar's own refusals (bad JSON,
failed validation, unknown route) and database outages are translated here so no
client ever sees a stack trace or a framework-specific body.
"""

from __future__ import annotations

import re
from typing import Any

import structlog
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)

from ledger import errors
from ledger.db import is_unreachable, sqlstate
from ledger.http.admission import query_key

log = structlog.get_logger(__name__)

_PATH = re.compile(r"at `\$\.data((?:\.[A-Za-z0-9_]+|\[\d+\])*)`")
_UNKNOWN = re.compile(r"unknown field `([^`]+)`")
_MISSING = re.compile(r"missing required field `([^`]+)`")


def error_body(error: errors.LedgerError) -> dict[str, Any]:
    inner: dict[str, Any] = {
        "type": error.type,
        "code": error.code,
        "message": error.message,
        "param": error.param,
    }
    inner.update(error.extra)
    return {"error": inner}


def error_response(error: errors.LedgerError) -> Response[dict[str, Any]]:
    return Response(error_body(error), status_code=error.status, media_type="application/json")


def _validation_param(exc: ValidationException) -> tuple[str | None, str]:
    """Recover the field path and message from msgspec's validation error."""
    cause = str(exc.__cause__ or "")
    detail = exc.extra[0] if isinstance(exc.extra, list) and exc.extra else {}
    message = str(detail.get("message", "")) if isinstance(detail, dict) else ""
    prefix = ""
    if m := _PATH.search(cause):
        prefix = m.group(1).lstrip(".")
    for pattern in (_UNKNOWN, _MISSING):
        if m := pattern.search(cause):
            name = m.group(1)
            return (f"{prefix}.{name}" if prefix else name), cause.split(" - at ")[0]
    if prefix:
        return prefix, message or cause
    key = detail.get("key") if isinstance(detail, dict) else None
    return (str(key) if key and key != "data" else None), message or cause or "validation failed"


def translate(exc: Exception, *, body_limit: int | None = None) -> errors.LedgerError:
    if isinstance(exc, errors.LedgerError):
        return exc
    if isinstance(exc, ValidationException):
        cause = str(exc.__cause__ or "")
        if "missing required field `data`" in cause:
            return errors.InvalidJson("request body is empty; a JSON object is required")
        param, message = _validation_param(exc)
        return errors.ValidationFailed(message, param=param)
    if isinstance(exc, NotFoundException):
        return errors.RouteNotFound("no such route")
    if isinstance(exc, MethodNotAllowedException):
        return errors.MethodNotAllowed("method not allowed on this route")
    if isinstance(exc, HTTPException):
        if exc.status_code == 413:
            limit = f" of {body_limit} bytes" if body_limit else ""
            return errors.PayloadTooLarge(f"request body is larger than the limit{limit}")
        if exc.status_code == 415:
            return errors.UnsupportedMediaType("a request body must be JSON (Content-Type: application/json)")
        if exc.status_code == 400:
            detail = str(exc.detail or "malformed request body")
            return errors.InvalidJson(f"request body is not valid JSON: {detail}")
        err = errors.LedgerError(str(exc.detail))
        err.status = exc.status_code  # type: ignore[misc]
        return err
    if is_unreachable(exc):
        return errors.DatabaseUnavailable("the database cannot be reached")
    if isinstance(exc, RecursionError):
        return errors.InvalidJson("request is nested too deeply")
    if (state := sqlstate(exc)) and state.startswith("22"):
        # Backstop, not the rule: inputs are checked (with `param`) before they reach SQL.
        # A data exception (numeric overflow, out-of-range timestamp, bad text) that still
        # gets through is the caller's input out of the storable range, never a 500.
        log.warning("request.data_exception", sqlstate=state, exc_info=exc)
        return errors.ValidationFailed("a value is outside the range the ledger can store")
    return errors.LedgerError("internal error")


def refusal(exc: Exception, *, path: str, body_limit: int | None) -> errors.LedgerError:
    """What a request that raised `exc` is answered with; a 5xx is logged with its cause."""
    error = translate(exc, body_limit=body_limit)
    if isinstance(error, errors.ServiceUnavailable):
        # An outage (a failover, a lost connection, no synchronous standby) is expected and
        # answered 503 for every request it touches: one line each, its cause, no traceback.
        cause = exc.__cause__ or exc
        log.warning(
            "request.unavailable", code=error.code, path=path, cause=(str(cause).splitlines() or [""])[0]
        )
    elif error.status >= 500:
        log.error("request.failed", code=error.code, path=path, exc_info=exc)
    return error


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    settings = getattr(request.app.state, "settings", None)
    error = refusal(exc, path=request.url.path, body_limit=getattr(settings, "max_body_bytes", None))
    if isinstance(exc, ValidationException) and error.param:
        # Litestar names a query parameter by its Python name; the caller sent its alias.
        error.param = query_key(request, error.param)
    return error_response(error)
