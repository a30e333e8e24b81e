"""What the LiteLLM hook decides without LiteLLM: its settings, the account, the reserve, the usage.

Pure functions over plain dicts (the proxy's request body and key), so they are tested
without a proxy and `ledger_client.litellm` stays a thin adapter. Invariants:
- a request is billed to exactly one ledger account, chosen by a documented order
  (request-metadata field when configured, then the key's team, then the key's user) and
  never guessed: no account is `None`, and the hook refuses the request;
- the reservation's output allowance is the request's own limit (`max_completion_tokens`,
  `max_tokens` or `max_output_tokens`) and `n`; absent, the ledger applies the model's default;
- usage sent to the ledger is counts only: LiteLLM's float `cost` is never copied into it;
- only generation routes whose usage has an adapter are billed (`BILLED_CALLS`): the hook
  refuses the others rather than let them through unbilled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger_client.usage import from_anthropic, from_openai_chat, from_openai_responses

# Call types (LiteLLM's route names) whose response usage is in Responses / Anthropic shape.
RESPONSES_CALLS = frozenset({"aresponses", "responses"})
ANTHROPIC_CALLS = frozenset({"anthropic_messages", "aanthropic_messages"})
# Streamed calls whose final usage the hook reads (chat's usage chunk, Responses'
# `response.completed`); a stream of any other billed call type is refused, since its
# usage could not be read and the hold would be released unbilled.
STREAMED_CALLS = frozenset({"acompletion", "completion"}) | RESPONSES_CALLS
# Every call type the hook bills; the others (embeddings, images, audio, ...) it refuses.
BILLED_CALLS = frozenset(
    {"acompletion", "completion", "atext_completion", "text_completion"} | RESPONSES_CALLS | ANTHROPIC_CALLS
)


def parse_model_map(text: str) -> dict[str, str]:
    """`LEDGER_LITELLM_MODEL_MAP`: a JSON object `{"litellm name": "ledger name"}`, or
    `litellm=ledger` pairs separated by commas. Empty text is an empty map."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        loaded = json.loads(text)
        if not isinstance(loaded, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()
        ):
            raise ValueError("LEDGER_LITELLM_MODEL_MAP must map model names (strings) to model names")
        return dict(loaded)
    pairs: dict[str, str] = {}
    for item in text.split(","):
        name, sep, ledger_name = item.partition("=")
        if not sep or not name.strip() or not ledger_name.strip():
            raise ValueError(f"LEDGER_LITELLM_MODEL_MAP: {item!r} is not litellm_name=ledger_name")
        pairs[name.strip()] = ledger_name.strip()
    return pairs


@dataclass(frozen=True, slots=True)
class HookSettings:
    """The hook's configuration (init parameters, or `from_env`).

    `url`, `token`: the ledger and a gateway token. `model_map`: LiteLLM model name (what the
    client asks for, the `model_name` of `model_list`) to the ledger's price-sheet name; a name
    not in the map is sent as it is. `account_field`: a request-metadata field that names the
    ledger account (trusted callers only: whoever sends the request chooses the wallet).
    `ttl_seconds`: the hold's lifetime (None: the ledger's default). `timeout`: seconds per
    ledger call. `currency`: not set here; the account's own currency applies."""

    url: str
    token: str
    model_map: Mapping[str, str] = field(default_factory=dict)
    account_field: str | None = None
    ttl_seconds: int | None = None
    timeout: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HookSettings:
        """`LEDGER_URL`, `LEDGER_GATEWAY_TOKEN` (both required), `LEDGER_LITELLM_MODEL_MAP`,
        `LEDGER_LITELLM_ACCOUNT_FIELD`, `LEDGER_LITELLM_HOLD_TTL_SECONDS`, `LEDGER_LITELLM_TIMEOUT`."""
        env = os.environ if env is None else env
        missing = [name for name in ("LEDGER_URL", "LEDGER_GATEWAY_TOKEN") if not env.get(name)]
        if missing:
            raise ValueError(f"the ledger's LiteLLM hook needs {', '.join(missing)} in the environment")
        ttl = env.get("LEDGER_LITELLM_HOLD_TTL_SECONDS")
        return cls(
            url=env["LEDGER_URL"],
            token=env["LEDGER_GATEWAY_TOKEN"],
            model_map=parse_model_map(env.get("LEDGER_LITELLM_MODEL_MAP", "")),
            account_field=env.get("LEDGER_LITELLM_ACCOUNT_FIELD") or None,
            ttl_seconds=int(ttl) if ttl else None,
            timeout=float(env.get("LEDGER_LITELLM_TIMEOUT", "10")),
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def resolve_account(
    settings: HookSettings, data: Mapping[str, Any], team_id: Any, user_id: Any
) -> tuple[str | None, str]:
    """(account id, where it came from): the configured request-metadata field, else the
    virtual key's team, else its user. (None, "none") when none of them names one."""
    if settings.account_field:
        for bucket in ("metadata", "litellm_metadata"):
            metadata = data.get(bucket)
            if isinstance(metadata, Mapping):
                found = _text(metadata.get(settings.account_field))
                if found:
                    return found, f"request {bucket}.{settings.account_field}"
    if _text(team_id):
        return str(team_id), "key team"
    if _text(user_id):
        return str(user_id), "key user"
    return None, "none"


def _positive_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def reserve_limits(data: Mapping[str, Any]) -> dict[str, int]:
    """The reserve's `max_output_tokens` and `n` from the request body (only those it names)."""
    limits: dict[str, int] = {}
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = _positive_int(data.get(name), name)
        if value is not None:
            limits["max_output_tokens"] = value
            break
    n = _positive_int(data.get("n"), "n")
    if n is not None:
        limits["n"] = n
    return limits


def _dump(usage: Any) -> dict[str, Any]:
    if isinstance(usage, Mapping):
        return dict(usage)
    dump = getattr(usage, "model_dump", None)
    if callable(dump):
        dumped = dump(mode="json", exclude_none=True)
        if isinstance(dumped, Mapping):
            return dict(dumped)
    raise TypeError(f"usage must be a mapping or have model_dump(), got {type(usage).__name__}")


def from_litellm_chat(usage: Any) -> dict[str, Any]:
    """LiteLLM's chat `Usage` (OpenAI chat's shape) as ledger usage.

    LiteLLM's `prompt_tokens` counts cache reads and writes (as OpenAI's does), its
    `prompt_tokens_details.cache_write_tokens` is the write count W, and its
    `cache_creation_token_details` carries Anthropic's 5-minute / 1-hour split (W5 / W1).
    Its float `cost` is dropped: the ledger prices the counts itself."""
    data = _dump(usage)
    data.pop("cost", None)
    details = data.get("prompt_tokens_details")
    if isinstance(details, Mapping):
        details = dict(details)
        creation = details.pop("cache_creation_token_details", None)
        written = details.get("cache_write_tokens", details.get("cache_creation_tokens"))
        details.pop("cache_creation_tokens", None)
        if written is not None:
            details["cache_write_tokens"] = written
        data["prompt_tokens_details"] = details
        if isinstance(creation, Mapping):
            w5, w1 = creation.get("ephemeral_5m_input_tokens"), creation.get("ephemeral_1h_input_tokens")
            if w5:
                data["claude_cache_creation_5_m_tokens"] = w5
            if w1:
                data["claude_cache_creation_1_h_tokens"] = w1
    return from_openai_chat(data)


def ledger_usage(call_type: str, usage: Any) -> dict[str, Any]:
    """The response's usage in the ledger's shape, by the route that produced it: the
    Responses API through `from_openai_responses`, Anthropic's `/v1/messages` through
    `from_anthropic`, everything else (chat completions) through `from_litellm_chat`."""
    if call_type in RESPONSES_CALLS:
        data = _dump(usage)
        data.pop("cost", None)
        return from_openai_responses(data)
    if call_type in ANTHROPIC_CALLS:
        data = _dump(usage)
        data.pop("cost", None)
        return from_anthropic(data)
    return from_litellm_chat(usage)


def response_usage(response: Any) -> Any:
    """The usage object of a response (a pydantic model or, on the Anthropic route, a dict)."""
    if isinstance(response, Mapping):
        return response.get("usage")
    return getattr(response, "usage", None)
