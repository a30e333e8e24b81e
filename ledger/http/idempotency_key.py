"""The idempotency key of a money-moving request: the body field, the `Idempotency-Key` header, or both.

The two are the same thing with the same semantics (the key is part of the request
hash exactly as if it had been sent in the body), so a gateway may use whichever its
HTTP stack makes easier. Invariants:
- one of them is required (else 422 `validation_error`, param `idempotency_key`,
  exactly as a body without the field was refused before the header existed);
- the header is checked against the same constraints as the field (1..255 chars);
- both present and different is 422 `validation_error` naming `idempotency_key`:
  guessing which one the caller meant could replay the wrong request.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request

from ledger.errors import ValidationFailed
from ledger.schemas import IdempotencyKey

HEADER = "Idempotency-Key"

T = TypeVar("T", bound=msgspec.Struct)


def resolve(header: str | None, field: str | None) -> str:
    if header is None:
        if field is None:
            raise ValidationFailed(
                f"Object missing required field `idempotency_key` (or the {HEADER} header)",
                param="idempotency_key",
            )
        return field
    try:
        key = msgspec.convert(header, IdempotencyKey)
    except msgspec.ValidationError as error:
        raise ValidationFailed(f"{HEADER} header: {error}", param="idempotency_key") from error
    if field is not None and field != key:
        raise ValidationFailed(
            f"the {HEADER} header and the body's idempotency_key differ; send one, or the same in both",
            param="idempotency_key",
        )
    return key


def with_key(header: str | None, body: msgspec.Struct, kind: type[T]) -> T:
    """`body` (the wire Struct, key optional) as `kind` (the service's Struct, key required)."""
    key = resolve(header, getattr(body, "idempotency_key", None))
    return kind(**{**msgspec.structs.asdict(body), "idempotency_key": key})


def keyed(request: Request[Any, Any, Any], body: msgspec.Struct, kind: type[T]) -> T:
    return with_key(request.headers.get(HEADER), body, kind)
