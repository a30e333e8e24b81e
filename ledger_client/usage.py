"""Upstream usage objects in the ledger's usage shape (the contract's "Charging usage").

The ledger's shape is OpenAI chat completions' `usage`:
`prompt_tokens` (P, every input token, cached or not), `completion_tokens` (C, reasoning
included), `prompt_tokens_details.cached_tokens` (R), `prompt_tokens_details.cache_write_tokens`
(W), `claude_cache_creation_5_m_tokens` / `claude_cache_creation_1_h_tokens` (W5, W1),
`completion_tokens_details.reasoning_tokens`. Valid usage has R + W <= P and W5 + W1 <= W.

- `from_openai_chat`: already that shape; copied as sent (the ledger keeps unpriced fields).
- `from_openai_responses`: `input_tokens` / `output_tokens` are P / C (Responses' input
  count includes cached tokens, as chat's prompt count does); details renamed.
- `from_anthropic`: Anthropic's `input_tokens` EXCLUDES cache reads and writes, so
  P = input_tokens + cache_read_input_tokens + cache_creation_input_tokens;
  R = cache_read_input_tokens; W = cache_creation_input_tokens (or, when only the
  `cache_creation` breakdown is sent, its sum); W5 / W1 from
  `cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens`; C = output_tokens.

Each adapter accepts a mapping or an SDK object (anything with `model_dump()`, as the
OpenAI and Anthropic SDKs' pydantic models have). Counts are copied, never guessed: a
field that is missing stays missing (the ledger then applies its defaults or refuses),
except that the sums above treat an absent or null part as 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _as_mapping(usage: Mapping[str, Any] | Any) -> dict[str, Any]:
    if isinstance(usage, Mapping):
        return dict(usage)
    dump = getattr(usage, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return dict(dumped)
    raise TypeError(f"usage must be a mapping or have model_dump(), got {type(usage).__name__}")


def _count(value: Any) -> int:
    """A part of a sum: absent or null is 0; anything else must already be a count."""
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        raise ValueError(f"token counts must be non-negative integers, got {value!r}")
    return value


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


def from_openai_chat(usage: Mapping[str, Any] | Any) -> dict[str, Any]:
    """Chat completions' usage is the ledger's shape: a copy, nulls dropped."""
    return _without_none(_as_mapping(usage))


def from_openai_responses(usage: Mapping[str, Any] | Any) -> dict[str, Any]:
    """Responses API usage (`input_tokens`, `output_tokens`, `*_tokens_details`) as ledger usage."""
    data = _as_mapping(usage)
    out: dict[str, Any] = {
        "prompt_tokens": data.get("input_tokens"),
        "completion_tokens": data.get("output_tokens"),
    }
    if data.get("total_tokens") is not None:
        out["total_tokens"] = data["total_tokens"]
    cached = (data.get("input_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    reasoning = (data.get("output_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return _without_none(out)


def from_anthropic(usage: Mapping[str, Any] | Any) -> dict[str, Any]:
    """Anthropic Messages usage (native) as ledger usage; see the module docstring for the sums."""
    data = _as_mapping(usage)
    read = _count(data.get("cache_read_input_tokens"))
    creation = data.get("cache_creation") or {}
    w5 = _count(creation.get("ephemeral_5m_input_tokens"))
    w1 = _count(creation.get("ephemeral_1h_input_tokens"))
    written_total = data.get("cache_creation_input_tokens")
    written = _count(written_total) if written_total is not None else w5 + w1
    uncached = data.get("input_tokens")
    out: dict[str, Any] = {
        # No input count, no prompt count: the ledger refuses it rather than bill a guess.
        "prompt_tokens": None if uncached is None else _count(uncached) + read + written,
        "completion_tokens": data.get("output_tokens"),
    }
    details: dict[str, Any] = {}
    if read:
        details["cached_tokens"] = read
    if written or written_total is not None:
        details["cache_write_tokens"] = written
    if details:
        out["prompt_tokens_details"] = details
    if w5:
        out["claude_cache_creation_5_m_tokens"] = w5
    if w1:
        out["claude_cache_creation_1_h_tokens"] = w1
    return _without_none(out)
