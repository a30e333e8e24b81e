"""Upstream usage objects in the ledger's usage shape (the contract's "Charging usage").

The ledger's shape is OpenAI chat completions' `usage`:
`prompt_tokens` (P, every input token, cached or not), `completion_tokens` (C, reasoning
included), `prompt_tokens_details.cached_tokens` (R), `prompt_tokens_details.cache_write_tokens`
(W), `claude_cache_creation_5_m_tokens` / `claude_cache_creation_1_h_tokens` (W5, W1),
`completion_tokens_details.reasoning_tokens`. Valid usage has R + W <= P and W5 + W1 <= W.

- `from_openai_chat`: already that shape; copied as sent (the ledger keeps unpriced fields).
- `from_openai_responses`: `input_tokens` / `output_tokens` are P / C (Responses' input
  count includes cache reads and writes, as chat's prompt count does);
  `input_tokens_details` (`cached_tokens` R, `cache_write_tokens` W, the unpriced
  `cache_write_tokens_details`) becomes `prompt_tokens_details` and `output_tokens_details`
  (`reasoning_tokens`) becomes `completion_tokens_details`, each copied whole.
- `from_anthropic`: Anthropic's `input_tokens` EXCLUDES cache reads and writes, so
  P = input_tokens + cache_read_input_tokens + cache_creation_input_tokens;
  R = cache_read_input_tokens; W = cache_creation_input_tokens (or, when only the
  `cache_creation` breakdown is sent, its sum); W5 / W1 from
  `cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens`; C = output_tokens;
  reasoning = `output_tokens_details.thinking_tokens`. Unpriced fields (`service_tier`,
  `server_tool_use`, `speed`, ...) are kept as sent. A streamed `message_delta` usage has no
  `cache_creation` breakdown and may lack `input_tokens`: pass the `message_start` usage as
  `start=` and the delta's non-null counts are laid over it (as the Anthropic SDK's own
  stream accumulator does), so 1-hour writes are not billed at the 5-minute rate.
  `BetaUsage.iterations` entries of type `compaction` (server-side requests that summarize
  the context, whose tokens the top-level fields leave out) are added into every count, so
  they are billed with the message at its model's rates (the long-context tier is then
  decided on the sum); other iterations (`message`, `advisor_message`,
  `fallback_message`) are kept unpriced as sent, the top-level counts covering the message.

Each adapter accepts a mapping or an SDK object (a pydantic model: read with
`model_dump(mode="json", exclude_none=True)`, so nulls are dropped at every depth).
Counts are copied, never guessed: a field that is missing stays missing (the ledger then
applies its defaults or refuses), except that the sums above treat an absent or null part as 0.

`as_ledger_usage` is what the client sends for any usage it is given: a mapping as the
ledger's shape, or one of the SDK usage types in `SDK_USAGE_TYPES` converted by its
adapter (recognised by exact module and class name, so the SDKs are never imported here);
anything else is a `TypeError` before a request is made.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

Adapter = Callable[[Any], dict[str, Any]]

# Names the ledger prices: never copied from an upstream's unpriced fields.
_LEDGER_NAMES = frozenset(
    {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
        "claude_cache_creation_5_m_tokens",
        "claude_cache_creation_1_h_tokens",
    }
)
_ANTHROPIC_PRICED = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "cache_creation",
        "output_tokens_details",
    }
)


def _as_mapping(usage: Mapping[str, Any] | Any) -> dict[str, Any]:
    if isinstance(usage, Mapping):
        return dict(usage)
    dump = getattr(usage, "model_dump", None)
    if callable(dump):
        dumped = dump(mode="json", exclude_none=True)
        if isinstance(dumped, Mapping):
            return dict(dumped)
    raise TypeError(f"usage must be a mapping or have model_dump(), got {type(usage).__name__}")


def _details(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


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
        "total_tokens": data.get("total_tokens"),
    }
    prompt_details = _without_none(_details(data, "input_tokens_details"))
    if prompt_details:
        out["prompt_tokens_details"] = prompt_details
    completion_details = _without_none(_details(data, "output_tokens_details"))
    if completion_details:
        out["completion_tokens_details"] = completion_details
    return _without_none(out)


def _anthropic_counts(data: Mapping[str, Any]) -> tuple[int | None, int, int, int, int, int | None]:
    """(uncached input, cache reads, cache writes, 5-minute writes, 1-hour writes, output) of one
    Anthropic usage record; the input and output counts stay None when absent."""
    read = _count(data.get("cache_read_input_tokens"))
    creation = _details(data, "cache_creation")
    w5 = _count(creation.get("ephemeral_5m_input_tokens"))
    w1 = _count(creation.get("ephemeral_1h_input_tokens"))
    written_total = data.get("cache_creation_input_tokens")
    written = _count(written_total) if written_total is not None else w5 + w1
    uncached = data.get("input_tokens")
    output = data.get("output_tokens")
    return (
        (None if uncached is None else _count(uncached)),
        read,
        written,
        w5,
        w1,
        (None if output is None else _count(output)),
    )


def from_anthropic(
    usage: Mapping[str, Any] | Any, *, start: Mapping[str, Any] | Any | None = None
) -> dict[str, Any]:
    """Anthropic Messages usage (native) as ledger usage; see the module docstring for the sums.

    `start`: for a streamed `message_delta` usage, the `message_start` message's usage; the
    delta's non-null fields win, the rest (notably the `cache_creation` breakdown) come from it.
    """
    data = _as_mapping(usage)
    if start is not None:
        data = {**_as_mapping(start), **_without_none(data)}
    uncached, read, written, w5, w1, output = _anthropic_counts(data)
    # Compaction iterations (BetaUsage.iterations, type "compaction") are server-side requests
    # of their own whose tokens the top-level fields leave out: billed with the message's.
    for item in data.get("iterations") or ():
        entry = _as_mapping(item)
        if entry.get("type") == "compaction":
            more = _anthropic_counts(entry)
            uncached = None if uncached is None or more[0] is None else uncached + more[0]
            read, written, w5, w1 = read + more[1], written + more[2], w5 + more[3], w1 + more[4]
            output = None if output is None or more[5] is None else output + more[5]
    out: dict[str, Any] = {
        k: v for k, v in data.items() if k not in _ANTHROPIC_PRICED and k not in _LEDGER_NAMES
    }
    # No input count, no prompt count: the ledger refuses it rather than bill a guess.
    out["prompt_tokens"] = None if uncached is None else uncached + read + written
    out["completion_tokens"] = output
    details: dict[str, Any] = {}
    if read:
        details["cached_tokens"] = read
    if written or data.get("cache_creation_input_tokens") is not None:
        details["cache_write_tokens"] = written
    if details:
        out["prompt_tokens_details"] = details
    if w5:
        out["claude_cache_creation_5_m_tokens"] = w5
    if w1:
        out["claude_cache_creation_1_h_tokens"] = w1
    thinking = _details(data, "output_tokens_details").get("thinking_tokens")
    if thinking is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": thinking}
    return _without_none(out)


# The SDK usage types the client accepts as they are, by (module, class), with their adapter.
SDK_USAGE_TYPES: dict[tuple[str, str], Adapter] = {
    ("openai.types.completion_usage", "CompletionUsage"): from_openai_chat,
    ("openai.types.responses.response_usage", "ResponseUsage"): from_openai_responses,
    ("anthropic.types.usage", "Usage"): from_anthropic,
    ("anthropic.types.beta.beta_usage", "BetaUsage"): from_anthropic,
}
# Streamed deltas: incomplete on their own (no cache_creation breakdown), so never guessed at.
_PARTIAL_TYPES = frozenset(
    {
        ("anthropic.types.message_delta_usage", "MessageDeltaUsage"),
        ("anthropic.types.beta.beta_message_delta_usage", "BetaMessageDeltaUsage"),
    }
)
_ACCEPTED = (
    "a Mapping in the ledger's usage shape (OpenAI chat's), or an SDK usage object: openai "
    "CompletionUsage or ResponseUsage, anthropic Usage or BetaUsage (or the output of "
    "from_openai_chat / from_openai_responses / from_anthropic)"
)


def _json_copy(value: Any, path: str) -> Any:
    """A deep copy of JSON data; anything that is not JSON is a TypeError naming its path."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: keys must be strings, got {type(key).__name__} {key!r}")
            copy[key] = _json_copy(item, f"{path}.{key}")
        return copy
    if isinstance(value, list | tuple):
        return [_json_copy(item, f"{path}[{i}]") for i, item in enumerate(value)]
    kind = type(value)
    raise TypeError(f"{path}: {kind.__module__}.{kind.__qualname__} is not JSON; usage must be {_ACCEPTED}")


def as_ledger_usage(usage: object) -> dict[str, Any]:
    """The ledger usage (a JSON-ready dict) that `usage` stands for, or a TypeError.

    A Mapping is taken as already in the ledger's shape (sent as given). An OpenAI chat
    `CompletionUsage` is that shape too; a Responses `ResponseUsage` and an Anthropic
    `Usage` / `BetaUsage` go through their adapter, so Anthropic's `input_tokens` is never
    sent as P. A streamed Anthropic `MessageDeltaUsage` is refused: it needs its
    `message_start` usage (`from_anthropic(delta, start=...)`).
    """
    if isinstance(usage, Mapping):
        copied: dict[str, Any] = _json_copy(usage, "usage")
        return copied
    for cls in type(usage).__mro__:
        key = (cls.__module__, cls.__qualname__)
        adapter = SDK_USAGE_TYPES.get(key)
        if adapter is not None:
            adapted: dict[str, Any] = _json_copy(adapter(usage), "usage")
            return adapted
        if key in _PARTIAL_TYPES:
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__} is a streamed delta without the cache_creation"
                " breakdown; send from_anthropic(delta_usage, start=message_start_usage) or the"
                " accumulated message's usage"
            )
    kind = type(usage)
    raise TypeError(f"usage must be {_ACCEPTED}; got {kind.__module__}.{kind.__qualname__}")
