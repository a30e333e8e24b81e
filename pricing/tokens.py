"""Token counts: the one place that decides what a usable count is.

Invariants kept here:
- a count is a Python `int` and never a `bool` or a `float` (not even ``1.0``): JSON
  numbers with a fraction or an exponent are refused rather than truncated;
- counts are bounded above so that no count times any accepted rate can leave the
  ledger's NUMERIC(38, 12) range: at most `MAX_TOKENS` tokens (10^12, far beyond any
  context window) and at most `MAX_COMPLETIONS` completions per request.

Callers turn `CountError` into their own error with the field's `param`.
"""

from __future__ import annotations

MAX_TOKENS = 10**12
MAX_COMPLETIONS = 10**6


class CountError(ValueError):
    """A value that is not a usable count; the message says why, without naming the field."""


def as_count(value: object, *, minimum: int = 0, maximum: int = MAX_TOKENS) -> int:
    """Return `value` as a count in [minimum, maximum] or raise `CountError`."""
    if isinstance(value, bool):
        raise CountError("must be an integer, not a boolean")
    if not isinstance(value, int):
        if isinstance(value, float):
            raise CountError(f"must be an integer, not {value!r}")
        raise CountError("must be an integer")
    if value < minimum:
        raise CountError("must not be negative" if minimum == 0 else f"must be at least {minimum}")
    if value > maximum:
        raise CountError(f"must be at most {maximum}")
    return value
