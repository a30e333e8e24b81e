"""schemathesis checks narrowed where a rule of a money API is not a schema rule (SCHEMATHESIS_HOOKS).

Every check of schemathesis runs against the service (`tests/contract/test_schemathesis.py`).
Three are narrowed here, each by the exact answers listed below with the reason beside it;
anything else they flag still fails the run:

- `positive_data_acceptance`: a request valid by the OpenAPI document must be accepted.
  Rules that relate two fields, two requests, a field to the clock, or a value to data
  in the ledger cannot be written in JSON Schema; a 422 naming one of them is the
  correct answer to a schema-valid request.
- `not_a_server_error`: 503 `pricing_unavailable` is the contract's answer to a quote or
  reserve for a currency or model that no price version prices (documented per
  operation); every other 5xx fails.
- `ensure_resource_availability`: after `POST /admin/v1/accounts`, schemathesis follows
  inferred links to every `/accounts/{account_id}/...` path. An account's alert and its
  budgets are resources of their own, created by their PUT: a new account has none, and
  404 `alert_not_found` / `budget_not_found` is the truth (the account itself is found).
"""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure
from schemathesis.specs.openapi.checks import ensure_resource_availability, positive_data_acceptance

NARROWED = ("positive_data_acceptance", "not_a_server_error", "ensure_resource_availability")
# Sub-resources of an account that exist only once their own PUT has run.
OWN_RESOURCES = (b'"code":"alert_not_found"', b'"code":"budget_not_found"')

# (error code, message pattern) -> why JSON Schema cannot state the rule
SEMANTIC_422: dict[tuple[str, str], str] = {
    ("usage_invalid", ""): "usage counts relate to each other (R + W <= P, W5 + W1 <= W, reasoning <= C) "
    "and may only grow from one checkpoint to the next",
    ("model_limit_exceeded", ""): "a model's token limits are data of the active price version",
    ("validation_error", r"NUL character"): "U+0000 is refused in every string and key at any depth "
    "(PostgreSQL cannot store it); free-form objects (usage, metadata) cannot carry that pattern",
    (
        "usage_invalid",
        r"must be an integer, not",
    ): "JSON Schema's integer admits 1.0; a count must be a JSON integer",
    (
        "validation_error",
        r"must be an integer, not",
    ): "JSON Schema's integer admits 1.0; a count must be a JSON integer",
    ("validation_error", r"^Expected `int[^`]*`, got `float`"): "JSON Schema's integer admits 1.0; "
    "an integer field must be a JSON integer",
    (
        "validation_error",
        r"is not a date and time that exists|^effective_at: must be an ISO-8601|"
        r"^models\[\d+\]\.retires_at: must be an ISO-8601",
    ): "a calendar (30 February) is not a pattern: a timestamp that matches the documented pattern "
    "on a day that does not exist",
    ("validation_error", r" is before |must be earlier than"): "a range's end is compared with its start "
    "(or with now, its default)",
    ("validation_error", r"idempotency_key.*(differ|or the Idempotency-Key header)"): "the key comes in "
    "the body or the Idempotency-Key header, one of them required and equal if both: "
    "OpenAPI cannot relate a header to a body field",
    ("validation_error", r"give either usage or the reservation fields"): "a quote takes usage or the "
    "reservation fields, not both",
    ("validation_error", r"give credit_limit, metadata or both"): "a PATCH must change something",
    ("validation_error", r"must be in the future"): "compared with the clock",
    ("validation_error", r"period is required with an amount|period .* without an amount"): "a budget's "
    "period goes with its amount",
    ("validation_error", r"metadata is larger than"): "metadata is bounded by its size as JSON",
    ("validation_error", r"^metadata_key and metadata_value go together"): "the hold list's metadata "
    "filter is one key/value pair: either query parameter alone is refused",
    ("validation_error", r"^webhook_url's host (does not resolve|resolves to a)"): "a webhook destination "
    "is judged by where its host resolves (public, or an allowed network), which no pattern can state",
    ("validation_error", r"cannot be given when amount is null"): "a budget's removal takes no threshold",
    ("validation_error", r"drops \d+ model"): "depends on the models the active price version prices",
    (
        "validation_error",
        r"must be below the model's max_input_tokens|long-context table must give|standard table does not "
        r"give|duplicate model|must not exceed the model's max_output_tokens",
    ): "a price document's fields relate: the long-context threshold is below the model's input limit, "
    "both tables give the same categories, a model appears once, its default output allowance is at "
    "most its output limit",
    (
        "validation_error",
        r"give either adjust_percent or rates, not both|is required \(or give adjust_percent\)",
    ): "a plan's model takes a percent or rate tables: one of two optional fields, exactly",
    ("validation_error", r"effective rate .* is above"): "a plan's effective rates depend on the list "
    "rates of the price versions it is materialised at",
    ("validation_error", r"prices in [A-Z]{3}"): "an account's plan, or the price version a plan "
    "revision is shown at, is of the account's / plan's currency: data, not a pattern",
    ("validation_error", r"^account .* is in [A-Z]{3}, not [A-Z]{3}: omit currency"): "a quote for an "
    "account is in the account's currency (a currency given must be it): data, not a pattern",
}


def semantic_refusal(response: Any) -> str | None:
    if response.status_code != 422:
        return None
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    for (code, pattern), reason in SEMANTIC_422.items():
        if error.get("code") == code and re.search(pattern, str(error.get("message", ""))):
            return reason
    return None


@schemathesis.check
def positive_data_acceptance_narrowed(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)
    except Failure:
        if semantic_refusal(response) is not None:
            return None
        raise


@schemathesis.check
def not_a_server_error_narrowed(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return not_a_server_error(ctx, response, case)
    except Failure:
        if response.status_code == 503 and b'"code":"pricing_unavailable"' in response.content:
            return None
        raise


@schemathesis.check
def ensure_resource_availability_narrowed(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return ensure_resource_availability(ctx, response, case)
    except Failure:
        if response.status_code == 404 and any(code in response.content for code in OWN_RESOURCES):
            return None
        raise
