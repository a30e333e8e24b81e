"""The error shape in the OpenAPI document, and `refusals(...)`, which documents it per status.

Every refusal the service answers is `{"error": {"type", "code", "message", "param", ...}}`
(`ledger.http.errors.error_body`); a 402 adds `required`, `available`, `currency` and the
`reservation` breakdown inside `error` (a `budget_exceeded` adds `budget_key`, `budget`,
`spent`, `held`, `required`, `period_start` and `period_end`; a 410 `model_retired` adds
`retires_at`). A handler lists the statuses it can answer:

    @post("/{hold_id:str}/settle", responses=refusals(GUARDED, BODY, 404, 409))

Invariant: the description of each status names the codes the service uses for it, so
a reader of the document knows what to branch on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from litestar.openapi.datastructures import ResponseSpec

from ledger.openapi.shapes import Amount


class ErrorDetail(msgspec.Struct, frozen=True):
    """What went wrong; `param` names the offending field (dotted path) or is null."""

    type: str
    code: str
    message: str
    param: str | None
    required: Amount | None = None
    available: Amount | None = None
    currency: str | None = None
    reservation: dict[str, Any] | None = None
    # insufficient_funds, budget_exceeded: the plan that sized it, {"id", "revision"} (null: list)
    plan: dict[str, Any] | None = None
    # budget_exceeded: the key's budget, its period spend and holds, and the period (UTC)
    budget: Amount | None = None
    spent: Amount | None = None
    held: Amount | None = None
    period_start: str | None = None
    period_end: str | None = None
    budget_key: str | None = None
    # model_retired: when the model retired (ISO 8601, UTC)
    retires_at: str | None = None


class ErrorBody(msgspec.Struct, frozen=True):
    """The one error shape of every refusal."""

    error: ErrorDetail


# Statuses every guarded (/v1, /admin/v1) operation can answer: no or unknown token (401),
# wrong surface or role (403), a parameter refused (422), too many failed authentications
# from the client's address (429), the database unreachable (503).
GUARDED = (401, 403, 422, 429, 503)
# Statuses of an operation that reads a JSON body.
BODY = (400, 413, 415, 422)

DESCRIPTIONS = {
    400: "`invalid_json`: the body is not one well-formed JSON object (malformed, empty, "
    "a key given twice, nested too deep)",
    401: "`unauthorized`: no bearer token, or an unknown one",
    402: "`insufficient_funds`: the reservation exceeds `available`; `error` adds `required`, "
    "`available`, `currency`, the `reservation` breakdown and the account's price `plan`, so the caller "
    "can lower its output limit; "
    "`budget_exceeded`: the reservation would take its `budget_key`'s period spend plus open holds past "
    "the budget; `error` adds `budget_key`, `budget`, `spent`, `held`, `required`, `currency`, "
    "`period_start`, `period_end` and the account's price `plan`",
    403: "`forbidden`: a known token on the wrong surface, or a role too low",
    404: "`account_not_found`, `hold_not_found`, `price_version_not_found`, `model_not_found`, "
    "`reconciliation_run_not_found`, `budget_not_found`, `plan_not_found`: a named resource does not exist",
    409: "`idempotency_conflict`, `hold_state_conflict`, `account_exists`, `plan_exists`: the request "
    "conflicts with what is already recorded",
    410: "`model_retired`: the model is past the `retires_at` its price version gives; `error` adds "
    "`retires_at`. Holds reserved before still settle, release and reconcile",
    413: "`payload_too_large`: the body is larger than the service reads",
    415: "`unsupported_media_type`: the body is not `application/json`",
    422: "`validation_error`, `usage_invalid`, `model_limit_exceeded`: a field, parameter or "
    "query parameter is not acceptable; `param` names it. `price_version_not_effective`, "
    "`price_version_superseded`: the pinned `price_version` is not in effect yet, or was superseded "
    "longer ago than the pin grace",
    429: "`rate_limited`: too many failed authentications from this client address; `Retry-After` "
    "says in how many seconds it may try again (a correct token is refused too until then)",
    503: "`database_unavailable`, `pricing_unavailable`, `migrations_pending`: the database cannot be "
    "reached, or no valid price applies in the selected version",
}


def refusals(*groups: int | Iterable[int], notes: dict[int, str] | None = None) -> dict[int, ResponseSpec]:
    """`responses=` for a handler: the error shape for each status given (ints or tuples of ints).

    `notes` replaces the default description of a status where the operation says more.
    """
    statuses: set[int] = set()
    for group in groups:
        statuses.update((group,) if isinstance(group, int) else group)
    notes = notes or {}
    return {
        status: ResponseSpec(
            data_container=ErrorBody,
            description=notes.get(status, DESCRIPTIONS[status]),
            generate_examples=False,
        )
        for status in sorted(statuses)
    }


# Marks a 200 that `finish` also documents as `text/csv` (ResponseSpec takes one media type).
CSV_MARK = " [csv]"


def csv_or_json(what: str) -> dict[int, ResponseSpec]:
    """`responses=` entry for a report answered as JSON, or CSV with `?format=csv` / `Accept: text/csv`."""
    return {
        200: ResponseSpec(
            data_container=dict[str, Any],
            description=f"{what}: JSON, or CSV with ?format=csv or Accept: text/csv{CSV_MARK}",
            generate_examples=False,
        )
    }


def replay(
    data: Any, description: str = "the same request again: the original result"
) -> dict[int, ResponseSpec]:
    """`responses=` entry for an idempotent create that answers a replay with 200."""
    return {200: ResponseSpec(data_container=data, description=description, generate_examples=False)}
