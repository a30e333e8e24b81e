"""Query-parameter values the controllers share: timestamps, cursors, time ranges.

Litestar parses the declared type (a `datetime`, an `int`); these add the checks a
type cannot state, each a 422 naming the parameter: a timestamp must be representable
in UTC (Python and PostgreSQL both stop at year 9999 here), a cursor must be one this
service issues, and a range must not end before it starts.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from litestar.params import Parameter

from ledger.errors import ValidationFailed

# The page size and cursor every paginated list takes (`?limit=`, `?cursor=`).
Limit = Annotated[int, Parameter(ge=1, le=500, default=50)]
Cursor = Annotated[str | None, Parameter(default=None, max_length=200)]

_ID_CURSOR = re.compile(r"^[0-9]{1,18}$")  # a bigint id; 18 digits always fit


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


def id_cursor(value: str | None, *, param: str = "cursor") -> int | None:
    """A numeric cursor from a previous page's `next_cursor`."""
    if value is None:
        return None
    if not _ID_CURSOR.match(value):
        raise ValidationFailed(f"{param} is not one this service issued", param=param)
    return int(value)


def time_range(
    start: datetime | None, end: datetime | None, *, start_param: str = "from", end_param: str = "to"
) -> tuple[datetime | None, datetime | None]:
    """[start, end) in UTC: `from` inclusive, `to` exclusive, so adjacent ranges never overlap."""
    lo, hi = utc(start, param=start_param), utc(end, param=end_param)
    if lo is not None and hi is not None and hi < lo:
        raise ValidationFailed(f"{end_param} is before {start_param}", param=end_param)
    return lo, hi
