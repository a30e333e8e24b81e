"""Usage as the gateway reports it: read the counts that are priced, keep the rest as sent.

The gateway passes the upstream ``usage`` object unchanged. The counts priced are
(contract names in brackets):

- P ``prompt_tokens`` and C ``completion_tokens``: both required (a usage without
  them cannot be charged, and guessing 0 would under-bill);
- R ``prompt_tokens_details.cached_tokens`` (0 if absent);
- W5 ``claude_cache_creation_5_m_tokens`` and W1 ``claude_cache_creation_1_h_tokens``
  (0 if absent);
- W ``prompt_tokens_details.cache_write_tokens`` (W5 + W1 if absent);
- ``completion_tokens_details.reasoning_tokens`` (0 if absent): part of C, charged
  as output, so it is checked (<= C) but never charged separately;
- ``total_tokens`` is optional and never charged; if present it must be a count.

Invariants kept here (each refusal is a `UsageInvalid` naming the field):
- every count is a non-negative integer (bools and floats, even ``1.0``, refused);
  JSON null is the same as absent;
- W5 + W1 <= W and R + W <= P, reasoning <= C;
- every other field is kept in `Usage.raw` exactly as sent and ignored for pricing.

A `Usage` re-checks these relations when constructed, so one that exists is valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import msgspec

from pricing.errors import UsageInvalid
from pricing.tokens import MAX_TOKENS, CountError, as_count

# Wire path of each priced count, in the order checkpoints compare them.
WIRE_PATHS = {
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "cached_tokens": "prompt_tokens_details.cached_tokens",
    "cache_write_tokens": "prompt_tokens_details.cache_write_tokens",
    "cache_write_5m": "claude_cache_creation_5_m_tokens",
    "cache_write_1h": "claude_cache_creation_1_h_tokens",
    "reasoning_tokens": "completion_tokens_details.reasoning_tokens",
}


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """The priced counts of one usage report, plus the report as sent (`raw`).

    `cache_write_tokens` is W after the default rule (W5 + W1 when the report has none).
    Not hashable (`raw` is a dict).
    """

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    reasoning_tokens: int = 0
    raw: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, path in WIRE_PATHS.items():
            value = getattr(self, name)
            if type(value) is int and 0 <= value <= MAX_TOKENS:  # fast path; as_count says why not
                continue
            try:
                as_count(value)
            except CountError as exc:
                raise UsageInvalid(f"usage.{path}", str(exc)) from None
        problem = _relation_problem(
            self.prompt_tokens,
            self.completion_tokens,
            self.cached_tokens,
            self.cache_write_tokens,
            self.cache_write_5m,
            self.cache_write_1h,
            self.reasoning_tokens,
            w_given=True,
        )
        if problem is not None:
            raise UsageInvalid(f"usage.{problem[0]}", problem[1])

    @property
    def uncached_input_tokens(self) -> int:
        """P - R - W: prompt tokens charged at the plain input rate."""
        return self.prompt_tokens - self.cached_tokens - self.cache_write_tokens

    @property
    def other_cache_write_tokens(self) -> int:
        """W - W5 - W1: cache writes without a Claude lifetime."""
        return self.cache_write_tokens - self.cache_write_5m - self.cache_write_1h

    @classmethod
    def from_counts(
        cls,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int | None = None,
        cache_write_5m: int = 0,
        cache_write_1h: int = 0,
        reasoning_tokens: int = 0,
    ) -> Usage:
        """Build a usage from counts (W defaults to W5 + W1), with `raw` in the wire shape."""
        raw: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        details: dict[str, Any] = {}
        if cached_tokens:
            details["cached_tokens"] = cached_tokens
        if cache_write_tokens is not None:
            details["cache_write_tokens"] = cache_write_tokens
        if details:
            raw["prompt_tokens_details"] = details
        if reasoning_tokens:
            raw["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
        if cache_write_5m:
            raw["claude_cache_creation_5_m_tokens"] = cache_write_5m
        if cache_write_1h:
            raw["claude_cache_creation_1_h_tokens"] = cache_write_1h
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=cached_tokens,
            cache_write_tokens=cache_write_5m + cache_write_1h
            if cache_write_tokens is None
            else cache_write_tokens,
            cache_write_5m=cache_write_5m,
            cache_write_1h=cache_write_1h,
            reasoning_tokens=reasoning_tokens,
            raw=raw,
        )


def _relation_problem(
    prompt: int,
    completion: int,
    cached: int,
    written: int,
    w5: int,
    w1: int,
    reasoning: int,
    *,
    w_given: bool,
) -> tuple[str, str] | None:
    """The first broken relation between counts, as (wire path, message), or None.

    R + W > P is blamed on cached_tokens when there are any (the detail that most often
    disagrees with the total), else on whichever field gave W.
    """
    if w5 + w1 > written:
        return (
            WIRE_PATHS["cache_write_tokens"],
            (
                f"cache_write_tokens ({written}) is less than claude_cache_creation_5_m_tokens"
                f" + claude_cache_creation_1_h_tokens ({w5 + w1})"
            ),
        )
    if cached + written > prompt:
        if cached > 0:
            path = WIRE_PATHS["cached_tokens"]
        elif w_given:
            path = WIRE_PATHS["cache_write_tokens"]
        else:
            path = WIRE_PATHS["cache_write_5m" if w5 else "cache_write_1h"]
        return (
            path,
            (
                f"cached_tokens + cache_write_tokens ({cached + written})"
                f" is more than prompt_tokens ({prompt}), which includes them"
            ),
        )
    if reasoning > completion:
        return (
            WIRE_PATHS["reasoning_tokens"],
            (
                f"reasoning_tokens ({reasoning}) is more than completion_tokens ({completion}),"
                " which includes them"
            ),
        )
    return None


def _param(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if prefix else path


def _count(obj: Mapping[str, Any], key: str, prefix: str, path: str, *, required: bool = False) -> int | None:
    """The count at `obj[key]` (None if absent or null); errors name `prefix`.`path`."""
    value = obj.get(key)
    if value is None:
        if required:
            raise UsageInvalid(_param(prefix, path), "is required")
        return None
    if type(value) is int and 0 <= value <= MAX_TOKENS:
        return value
    try:
        return as_count(value)
    except CountError as exc:
        raise UsageInvalid(_param(prefix, path), str(exc)) from None


def _details(obj: Mapping[str, Any], key: str, prefix: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageInvalid(_param(prefix, key), "must be an object")
    return value


_SCALARS = frozenset({int, str, float, bool, type(None)})


def _copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (objects and arrays), leaving scalars as they are."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy_json(item) for item in value]
    return value


def _refuse(param: str, message: str) -> NoReturn:
    raise UsageInvalid(param, message)


def parse_usage(raw: object, *, param_prefix: str = "usage") -> Usage:
    """Read and check a usage object; errors name the field under `param_prefix`."""
    if not isinstance(raw, Mapping):
        _refuse(param_prefix, "must be an object")

    pre = param_prefix
    prompt = _count(raw, "prompt_tokens", pre, "prompt_tokens", required=True) or 0
    completion = _count(raw, "completion_tokens", pre, "completion_tokens", required=True) or 0
    _count(raw, "total_tokens", pre, "total_tokens")
    prompt_details = _details(raw, "prompt_tokens_details", pre)
    cached = _count(prompt_details, "cached_tokens", pre, WIRE_PATHS["cached_tokens"]) or 0
    given = _count(prompt_details, "cache_write_tokens", pre, WIRE_PATHS["cache_write_tokens"])
    w5 = _count(raw, "claude_cache_creation_5_m_tokens", pre, WIRE_PATHS["cache_write_5m"]) or 0
    w1 = _count(raw, "claude_cache_creation_1_h_tokens", pre, WIRE_PATHS["cache_write_1h"]) or 0
    completion_details = _details(raw, "completion_tokens_details", pre)
    reasoning = _count(completion_details, "reasoning_tokens", pre, WIRE_PATHS["reasoning_tokens"]) or 0
    written = w5 + w1 if given is None else given
    problem = _relation_problem(
        prompt, completion, cached, written, w5, w1, reasoning, w_given=given is not None
    )
    if problem is not None:
        _refuse(_param(pre, problem[0]), problem[1])
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        cache_write_tokens=written,
        cache_write_5m=w5,
        cache_write_1h=w1,
        reasoning_tokens=reasoning,
        raw=_copy_json(raw),
    )


def usage_grows_from(old: Usage, new: Usage) -> str | None:
    """None if every priced count of `new` is >= that of `old`, else the wire path of the
    first count that shrank (e.g. ``"prompt_tokens_details.cached_tokens"``; prefix it
    with ``usage.`` for an error's `param`). Streaming checkpoints may only grow.
    """
    for name, path in WIRE_PATHS.items():
        if getattr(new, name) < getattr(old, name):
            return path
    return None
