"""Query-parameter values the controllers share: timestamps, cursors, time ranges.

Timestamps (`as_of`, `from`, `to`) are declared as text with `TIMESTAMP_PATTERN` (so
the OpenAPI document states the format) and parsed by `timestamp`, the one reader of a
timestamp in a query string. The format is RFC 3339's: a date, optionally `T` and a
time (seconds and up to six decimals optional), optionally `Z` or a `+hh:mm` offset;
without an offset the time is UTC, a date alone is its midnight UTC. A bare number
(`as_of=0.5`, an epoch) is 422 naming the parameter, never a time in 1970: the
framework's own datetime conversion would accept it. A timestamp must also be
representable in UTC (Python and PostgreSQL both stop at year 9999), a cursor must be
one this service issues, and a range must not end before it starts; each refusal is a
422 naming the parameter.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from litestar.params import Parameter

from ledger.errors import ValidationFailed
from ledger.pagination import ID_CURSOR_PATTERN

# The page size and cursor every paginated list takes (`?limit=`, `?cursor=`). A cursor is
# the previous page's `next_cursor`; its documented pattern is the form this service issues
# (an id cursor is read by `ledger.pagination.id_cursor`).
Limit = Annotated[int, Parameter(ge=1, le=500, default=50)]
Cursor = Annotated[str | None, Parameter(default=None, max_length=200)]
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
IdCursor = Annotated[
    str | None, Parameter(default=None, max_length=18, schema_extra={"pattern": ID_CURSOR_PATTERN})
]
UuidCursor = Annotated[
    str | None, Parameter(default=None, max_length=36, schema_extra={"pattern": UUID_PATTERN})
]

TIMESTAMP_PATTERN = (
    r"^(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"([Tt]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?$"
)
_TIMESTAMP = re.compile(TIMESTAMP_PATTERN)
# Documented, not enforced by the framework: `timestamp` refuses with a readable message.
_DOCUMENTED = {"pattern": TIMESTAMP_PATTERN}
_FORMAT = "RFC 3339, e.g. 2026-12-01T00:00:00Z; no offset: UTC; a date alone: its midnight UTC"

AsOf = Annotated[
    str | None, Parameter(default=None, max_length=40, schema_extra=_DOCUMENTED, description=_FORMAT)
]
From = Annotated[
    str | None,
    Parameter(
        query="from",
        default=None,
        max_length=40,
        pattern=TIMESTAMP_PATTERN,
        description=f"inclusive; {_FORMAT}",
    ),
]
To = Annotated[
    str | None,
    Parameter(
        query="to",
        default=None,
        max_length=40,
        pattern=TIMESTAMP_PATTERN,
        description=f"exclusive; {_FORMAT}",
    ),
]


def timestamp(text: str | None, *, param: str) -> datetime | None:
    """A query parameter's timestamp in UTC (see the module docstring); else 422 naming `param`."""
    if text is None:
        return None
    if not _TIMESTAMP.fullmatch(text):
        raise ValidationFailed(f"{param} is not a timestamp ({_FORMAT})", param=param)
    try:
        parsed = datetime.fromisoformat(text.upper())  # RFC 3339 allows a lower-case t and z
    except ValueError as error:  # a day the month does not have, year 0
        raise ValidationFailed(f"{param} is not a date and time that exists", param=param) from error
    return utc(parsed, param=param)


def utc(value: datetime | None, *, param: str) -> datetime | None:
    """A timestamp in UTC; a naive one is taken as UTC. Out of range is 422."""
    if value is None:
        return None
    try:
        aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value
        return aware.astimezone(UTC)
    except (OverflowError, ValueError) as error:
        raise ValidationFailed(
            f"{param} is outside the representable range (years 1 to 9999, UTC)", param=param
        ) from error


def time_range(
    start: str | None, end: str | None, *, start_param: str = "from", end_param: str = "to"
) -> tuple[datetime | None, datetime | None]:
    """[start, end) in UTC: `from` inclusive, `to` exclusive, so adjacent ranges never overlap."""
    lo, hi = timestamp(start, param=start_param), timestamp(end, param=end_param)
    if lo is not None and hi is not None and hi < lo:
        raise ValidationFailed(f"{end_param} is before {start_param}", param=end_param)
    return lo, hi
