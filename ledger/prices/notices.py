"""Retirement notices: what an answer about a model says about its `retires_at`.

A price version may give a model a `retires_at` (`pricing.catalogue`). Before it, the
answers that start a request (a reserve, 201 and its 200 replay, and a quote) carry a
`notice` object the gateway can pass on, and an RFC 8594 `Sunset` header (an HTTP-date)
with the same time; at or after it those requests are refused (410 `model_retired`).
A single hold's GET and the by-key lookup of a hold (the request log) carry the notice of
its pinned version too (code `model_retired` once the time is past), with the same
`Sunset` header; other hold answers (settle, release, checkpoint, interrupt, lists) do not.

Invariants kept here:
- the notice comes from the price document already in hand or in the process's price
  cache (keyed by the immutable version id): it adds no database round trip on the hot
  path;
- "now" is the process's clock, read once per request (`now()`), the same instant for
  the retirement check and the notice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import msgspec
from litestar.datastructures import ResponseHeader

from ledger.prices.schemas import Notice
from pricing.catalogue import notice_of
from pricing.document import ModelPrice


def now() -> datetime:
    """The time a request is judged at (retirement, notice)."""
    return datetime.now(UTC)


def notice_for(price: ModelPrice, at: datetime) -> Notice | msgspec.UnsetType:
    """The notice of `price`'s model at `at`; UNSET (absent on the wire) without a retires_at."""
    notice = notice_of(price, at)
    return msgspec.UNSET if notice is None else Notice(**notice)


def sunset(notice: Notice | msgspec.UnsetType) -> str | None:
    """The `Sunset` header value (RFC 8594: an HTTP-date) for an answer carrying `notice`."""
    if isinstance(notice, msgspec.UnsetType):
        return None
    moment = datetime.fromisoformat(notice.retires_at.replace("Z", "+00:00"))
    return format_datetime(moment.astimezone(UTC), usegmt=True)


def sunset_headers(notice: Notice | msgspec.UnsetType) -> dict[str, str] | None:
    """Headers of an answer carrying `notice`: ``{"Sunset": <HTTP-date>}``, or None."""
    value = sunset(notice)
    return None if value is None else {"Sunset": value}


# For the OpenAPI document of the operations whose answers may carry a notice.
SUNSET_HEADER = ResponseHeader(
    name="Sunset",
    documentation_only=True,
    description="RFC 8594: when the model retires (an HTTP-date); sent with a `notice`, "
    "only when the model's price version gives it a retires_at",
)
