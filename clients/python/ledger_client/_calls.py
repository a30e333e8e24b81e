"""The gateway calls as data, shared by the async and the sync client (no I/O here).

A `Call` is what to send; `answer` turns the ledger's reply into a value or a
`LedgerError`. The clients only add the sending, the retry loop and the waiting.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar
from urllib.parse import quote as quote_path
from urllib.parse import urlencode

import httpx

from ledger_client.errors import LedgerError, error_from_response
from ledger_client.models import Balance, ChargeQuote, Hold, ReservationQuote, quote_from_wire
from ledger_client.usage import as_ledger_usage

T = TypeVar("T")

IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[dict[str, Any]], T]
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _usage_body(usage: object) -> dict[str, Any]:
    # Converted (or refused with a TypeError) here, while the call is built: before anything is sent.
    return {"usage": as_ledger_usage(usage)}


def new_idempotency_key() -> str:
    return f"ldgc-{uuid.uuid4().hex}"


def reserve(
    *,
    account_id: str,
    model: str,
    idempotency_key: str | None,
    max_output_tokens: int | None,
    max_input_tokens: int | None,
    n: int | None,
    price_version: str | None,
    ttl_seconds: int | None,
    metadata: Mapping[str, Any] | None,
    budget_key: str | None = None,
) -> Call[Hold]:
    # The key is fixed here, once per reserve, so every retry of this call carries the same one.
    key = idempotency_key or new_idempotency_key()
    body: dict[str, Any] = {"account_id": account_id, "idempotency_key": key, "model": model}
    optional = {
        "max_output_tokens": max_output_tokens,
        "max_input_tokens": max_input_tokens,
        "n": n,
        "price_version": price_version,
        "ttl_seconds": ttl_seconds,
        "budget_key": budget_key,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    if metadata:
        body["metadata"] = dict(metadata)
    return Call("POST", "/v1/holds", Hold.from_wire, body, {IDEMPOTENCY_HEADER: key})


def get_hold(hold_id: str) -> Call[Hold]:
    return Call("GET", f"/v1/holds/{hold_id}", Hold.from_wire)


def hold_by_key(account_id: str, idempotency_key: str) -> Call[Hold]:
    query = urlencode({"idempotency_key": idempotency_key})
    return Call("GET", f"/v1/accounts/{quote_path(account_id, safe='')}/holds/by-key?{query}", Hold.from_wire)


def checkpoint(hold_id: str, usage: object) -> Call[Hold]:
    return Call("POST", f"/v1/holds/{hold_id}/usage", Hold.from_wire, _usage_body(usage))


def settle(hold_id: str, usage: object) -> Call[Hold]:
    return Call("POST", f"/v1/holds/{hold_id}/settle", Hold.from_wire, _usage_body(usage))


def interrupt(hold_id: str, usage: object | None) -> Call[Hold]:
    body = _usage_body(usage) if usage is not None else {}
    return Call("POST", f"/v1/holds/{hold_id}/interrupt", Hold.from_wire, body)


def release(hold_id: str) -> Call[Hold]:
    return Call("POST", f"/v1/holds/{hold_id}/release", Hold.from_wire)


def balance(account_id: str) -> Call[Balance]:
    return Call("GET", f"/v1/accounts/{account_id}/balance", Balance.from_wire)


def quote(
    *,
    model: str,
    usage: object | None,
    price_version: str | None,
    currency: str | None,
    max_output_tokens: int | None,
    max_input_tokens: int | None,
    n: int | None,
    account_id: str | None = None,
) -> Call[ChargeQuote | ReservationQuote]:
    body: dict[str, Any] = {"model": model}
    if usage is not None:
        body.update(_usage_body(usage))
    optional = {
        "price_version": price_version,
        "currency": currency,
        "max_output_tokens": max_output_tokens,
        "max_input_tokens": max_input_tokens,
        "n": n,
        "account_id": account_id,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return Call("POST", "/v1/quotes", quote_from_wire, body)


def _decode(response: httpx.Response) -> Any:
    # parse_float=Decimal: should a number ever appear where money is expected, it is never a float.
    try:
        return json.loads(response.content or b"null", parse_float=Decimal)
    except ValueError:
        return response.text


def answer(call: Call[T], response: httpx.Response) -> T:
    """The call's value for a 2xx reply; otherwise raise the reply's `LedgerError`."""
    body = _decode(response)
    if response.is_success:
        if not isinstance(body, dict):
            raise LedgerError(response.status_code, "unexpected_response", "the reply is not a JSON object")
        return call.parse(body)
    raise error_from_response(response.status_code, body)


def request_kwargs(call: Call[Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"headers": call.headers}
    if call.body is not None:
        kwargs["content"] = json.dumps(call.body, separators=(",", ":")).encode()
        kwargs["headers"] = {**call.headers, "Content-Type": "application/json"}
    return kwargs
