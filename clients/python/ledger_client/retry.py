"""When and how long to wait before sending a call again.

Retried: transport failures (timeouts, refused or reset connections) and 503 answers
(the ledger's `database_unavailable` / `pricing_unavailable`, or a proxy in front of it).
Never retried: any other answer, 4xx included: the ledger decided, and asking again
would get the same refusal. Every call the client retries is safe to repeat: a reserve
is sent again with the same idempotency key (so it answers the hold the first attempt
made, if it landed), and checkpoint / interrupt / settle / release are idempotent by the
hold's state (a repeated settle with the same usage answers the same result).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

# httpx.TransportError covers TimeoutException (connect/read/write/pool) and NetworkError.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (httpx.TransportError,)
RETRYABLE_STATUSES = frozenset({503})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`attempts` in all (1 = no retry); the wait before retry k (1-based) is
    min(`max_delay`, `base_delay` x 2^(k-1)), with up to `jitter` of it added at random
    so many gateways that failed together do not come back together."""

    attempts: int = 4
    base_delay: float = 0.1
    max_delay: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.jitter < 0:
            raise ValueError("delays must not be negative")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 for the first retry)."""
        wait = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        return wait + random.uniform(0, wait * self.jitter)


NO_RETRY = RetryPolicy(attempts=1)
