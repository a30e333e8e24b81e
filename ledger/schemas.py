"""Wire types shared by several domains: identifiers, keys, amounts, pages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from ledger.errors import UsageInvalid, ValidationFailed

AccountId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$", max_length=128)]
Currency = Annotated[str, Meta(pattern=r"^[A-Z]{3}$")]
IdempotencyKey = Annotated[str, Meta(min_length=1, max_length=255)]
Reason = Annotated[str, Meta(min_length=1, max_length=2000)]
Reference = Annotated[str, Meta(max_length=500)]
# Amounts travel as plain decimal strings; ledger.money-style parsing happens in services
# (pricing.money.parse_amount) so that a JSON number is refused with a clear message.
AmountText = Annotated[str, Meta(max_length=64)]
Metadata = dict[str, Any]
PageLimit = Annotated[int, Meta(ge=1, le=500)]

MAX_METADATA_BYTES = 16_384


def check_metadata(metadata: dict[str, Any]) -> None:
    """Metadata (accounts, holds) is at most MAX_METADATA_BYTES as JSON; else 422 `metadata`."""
    if len(msgspec.json.encode(metadata)) > MAX_METADATA_BYTES:
        raise ValidationFailed(f"metadata is larger than {MAX_METADATA_BYTES} bytes", param="metadata")


# A usage object (settle, checkpoint, interrupt, quote) is kept with the hold as sent,
# unpriced fields included: the same bound as metadata. Depth is bounded for every body
# (ledger.http.body.MAX_DEPTH) and the key count by the bytes.
MAX_USAGE_BYTES = MAX_METADATA_BYTES


def check_usage(usage: dict[str, Any] | None) -> None:
    """A usage object is at most MAX_USAGE_BYTES as JSON; else 422 `usage_invalid`, param `usage`."""
    if usage is not None and len(msgspec.json.encode(usage)) > MAX_USAGE_BYTES:
        raise UsageInvalid(f"usage is larger than {MAX_USAGE_BYTES} bytes as JSON", param="usage")


def iso(ts: datetime) -> str:
    """RFC 3339 in UTC with a Z, the one timestamp format on the wire."""
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def as_utc(ts: datetime) -> datetime:
    """A naive datetime from a query parameter is taken as UTC."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


class Page(msgspec.Struct, frozen=True):
    data: list[Any]
    next_cursor: str | None
