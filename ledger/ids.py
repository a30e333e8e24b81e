"""Time-ordered UUIDs (version 7, RFC 9562) for holds: new rows land at the right edge of the index."""

from __future__ import annotations

import os
import time
from uuid import UUID


def uuid7() -> UUID:
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return UUID(int=value)


def parse_uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None
