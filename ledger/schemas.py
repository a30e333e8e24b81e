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


def documented(pattern: str, description: str | None = None) -> dict[str, Any]:
    """`Meta(extra_json_schema=...)` that puts `pattern` in the OpenAPI document only.

    For a rule the service checks itself with a message of its own (a blank reason, an
    amount, a cursor): the document states it exactly, and the refusal keeps its wording.
    """
    extra: dict[str, Any] = {"extra": {"pattern": pattern}}
    if description is not None:
        extra["description"] = description
    return extra


# White space as Python's str.strip() and str.isspace() see it, spelled out: a regex `\s`
# differs between engines (\x1c-\x1f are white space to Python, not to ECMA or Rust).
SPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = f"[^{SPACE}]"  # a search: some character that is not white space
TRIMMED = f"^[^{SPACE}]([\\s\\S]*[^{SPACE}])?$"  # no white space at either end

Reason = Annotated[str, Meta(min_length=1, max_length=2000, extra_json_schema=documented(NOT_BLANK))]
Reference = Annotated[str, Meta(max_length=500)]

# Amounts travel as plain decimal strings, parsed in services (pricing.money.parse_amount,
# so that a JSON number is refused with a clear message). The patterns state exactly what
# that parser reads (no exponent, no leading zero, at most 26 integer digits and 12
# decimals: NUMERIC(38,12)) and each field's sign rule, which the services check.
_UNSIGNED = r"(0|[1-9][0-9]{0,25})(\.[0-9]{1,12})?"
# Not zero: a non-zero integer part, or 0 and decimals that are not all zero (k zeros, then 1-9).
_NON_ZERO = "|".join(
    [r"[1-9][0-9]{0,25}(\.[0-9]{1,12})?"] + [rf"0\.0{{{k}}}[1-9][0-9]{{0,{11 - k}}}" for k in range(12)]
)
_AMOUNT = 'a plain decimal string such as "10.50": no exponent, at most 12 decimals'
AmountText = Annotated[str, Meta(max_length=64, extra_json_schema=documented(rf"^-?{_UNSIGNED}$", _AMOUNT))]
NonNegativeAmount = Annotated[
    str, Meta(max_length=64, extra_json_schema=documented(rf"^{_UNSIGNED}$", f">= 0; {_AMOUNT}"))
]
PositiveAmount = Annotated[
    str, Meta(max_length=64, extra_json_schema=documented(rf"^({_NON_ZERO})$", f"> 0; {_AMOUNT}"))
]
NonZeroAmount = Annotated[
    str, Meta(max_length=64, extra_json_schema=documented(rf"^-?({_NON_ZERO})$", f"signed, not 0; {_AMOUNT}"))
]
# A fraction in (0, 1], such as "0.8".
Fraction = Annotated[
    str,
    Meta(
        max_length=64,
        extra_json_schema=documented(
            rf"^({'|'.join(_NON_ZERO.split('|')[1:])}|1(\.0{{1,12}})?)$", "in (0, 1]"
        ),
    ),
]
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
