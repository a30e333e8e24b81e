"""Cursors of paginated lists, shared by the services and the HTTP layer.

A cursor is the previous page's `next_cursor`, and a list accepts only the form this
service issues: for lists ordered by a bigint id (journal transactions, alert events,
audit records) that is the id as decimal digits, at most 18 of them, so it always fits
a bigint. Anything else is refused as a 422 naming the parameter, never read as the
start of the list. The HTTP layer documents the same pattern (`ledger.http.query`).
"""

from __future__ import annotations

import re

from ledger.errors import ValidationFailed

ID_CURSOR_PATTERN = r"^[0-9]{1,18}$"  # a bigint id; 18 digits always fit

_ID_CURSOR = re.compile(ID_CURSOR_PATTERN)


def id_cursor(value: str | None, *, param: str = "cursor") -> int | None:
    """A numeric cursor from a previous page's `next_cursor`."""
    if value is None:
        return None
    if not _ID_CURSOR.match(value):
        raise ValidationFailed(f"{param} is not one this service issued", param=param)
    return int(value)
