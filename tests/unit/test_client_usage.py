"""The client's usage adapters, on the OpenAI and Anthropic SDKs' real usage types and on
plain mappings: adapted usage is valid ledger usage carrying every priced field, and it costs
what the upstream's own counts say, computed by hand at the contract example's rates. Also
what the client sends for a usage it is given (`as_ledger_usage`), and what it refuses.

Hand formulas (rates per 1M tokens, from `pricing.examples.contract_price_document`):
- claude-sonnet-4-6: uncached input 3, cache read 0.3, 5-minute write 3.75, 1-hour write 6,
  a write without a lifetime at the 5-minute rate (no plain `cache_write` rate), output 15;
- gpt-6-luna: input 2.5 / cached 0.25 / output 15, and 5 / 0.5 / 22.5 for the whole request
  when the prompt is above 272,000 tokens.
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
from anthropic.types import CacheCreation, MessageDeltaUsage, OutputTokensDetails, ServerToolUsage
from anthropic.types import Usage as AnthropicUsage
from anthropic.types.beta import BetaUsage
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types import CompletionUsage
from openai.types.completion_usage import CompletionTokensDetails, PromptTokensDetails
from openai.types.responses import ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails
from openai.types.responses.response_usage import (
    InputTokensDetailsCacheWriteTokensDetails as CacheWriteDetails,
)
from openai.types.responses.response_usage import OutputTokensDetails as ResponseOutputDetails

from ledger_client import from_anthropic, from_openai_chat, from_openai_responses
from ledger_client.usage import as_ledger_usage
from pricing.document import parse_price_document
from pricing.engine import compute_charge
from pricing.examples import contract_price_document
from pricing.usage import parse_usage

DOC = parse_price_document(contract_price_document())
CLAUDE = DOC.model("claude-sonnet-4-6")
LUNA = DOC.model("gpt-6-luna")
MILLION = Decimal(1_000_000)
COUNT = st.integers(0, 200_000)
FAST = settings(max_examples=300, deadline=None, database=None)


def test_anthropic_usage_by_hand() -> None:
    upstream = {
        "input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 3000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
        "output_tokens": 500,
        "service_tier": "standard",
    }
    usage = from_anthropic(upstream)
    assert usage == {
        "prompt_tokens": 5100,
        "completion_tokens": 500,
        "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 3000},
        "claude_cache_creation_5_m_tokens": 1000,
        "claude_cache_creation_1_h_tokens": 2000,
        "service_tier": "standard",  # unpriced, kept as sent
    }
    # 100 x 3 + 2000 x 0.3 + 1000 x 3.75 + 2000 x 6 + 500 x 15, per million
    assert compute_charge(CLAUDE, parse_usage(usage)).amount == Decimal("0.02415")


def test_anthropic_without_cache_and_without_input_count() -> None:
    assert from_anthropic({"input_tokens": 10, "output_tokens": 3}) == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
    }
    # Only the breakdown: W is its sum.
    assert from_anthropic(
        {"input_tokens": 1, "output_tokens": 0, "cache_creation": {"ephemeral_1h_input_tokens": 7}}
    ) == {
        "prompt_tokens": 8,
        "completion_tokens": 0,
        "prompt_tokens_details": {"cache_write_tokens": 7},
        "claude_cache_creation_1_h_tokens": 7,
    }
    # No input count: no prompt count (the ledger refuses rather than bill a guess).
    assert "prompt_tokens" not in from_anthropic({"output_tokens": 5})
    with pytest.raises(ValueError):
        from_anthropic({"input_tokens": 1.5, "output_tokens": 1})


def test_openai_adapters_by_hand() -> None:
    chat = {
        "prompt_tokens": 12000,
        "completion_tokens": 800,
        "total_tokens": 12800,
        "prompt_tokens_details": {"cached_tokens": 2000, "audio_tokens": None},
        "completion_tokens_details": {"reasoning_tokens": 300},
    }
    assert from_openai_chat(chat) == chat
    responses = {
        "input_tokens": 12000,
        "input_tokens_details": {"cached_tokens": 2000},
        "output_tokens": 800,
        "output_tokens_details": {"reasoning_tokens": 300},
        "total_tokens": 12800,
    }
    usage = from_openai_responses(responses)
    assert usage == {
        "prompt_tokens": 12000,
        "completion_tokens": 800,
        "total_tokens": 12800,
        "prompt_tokens_details": {"cached_tokens": 2000},
        "completion_tokens_details": {"reasoning_tokens": 300},
    }
    # 10000 x 2.5 + 2000 x 0.25 + 800 x 15, per million
    assert compute_charge(LUNA, parse_usage(usage)).amount == Decimal("0.0375")


def test_sdk_types_map_every_priced_field() -> None:
    chat = CompletionUsage(
        prompt_tokens=12000,
        completion_tokens=800,
        total_tokens=12800,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=2000, cache_write_tokens=3000, audio_tokens=0
        ),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=300, audio_tokens=None),
    )
    assert from_openai_chat(chat) == {
        "prompt_tokens": 12000,
        "completion_tokens": 800,
        "total_tokens": 12800,
        "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 3000, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 300},
    }
    responses = ResponseUsage(
        input_tokens=12000,
        input_tokens_details=InputTokensDetails(
            cached_tokens=2000,
            cache_write_tokens=3000,
            cache_write_tokens_details=CacheWriteDetails(ttl_30m_tokens=1000, ttl_12h_tokens=2000),
        ),
        output_tokens=800,
        output_tokens_details=ResponseOutputDetails(reasoning_tokens=300),
        total_tokens=12800,
    )
    assert from_openai_responses(responses) == {
        "prompt_tokens": 12000,
        "completion_tokens": 800,
        "total_tokens": 12800,
        "prompt_tokens_details": {
            "cached_tokens": 2000,
            "cache_write_tokens": 3000,
            # OpenAI's cache lifetimes are not Claude's: kept, unpriced; all 3000 are W.
            "cache_write_tokens_details": {"ttl_30m_tokens": 1000, "ttl_12h_tokens": 2000},
        },
        "completion_tokens_details": {"reasoning_tokens": 300},
    }
    # 7000 x 2.5 + 2000 x 0.25 + 3000 x 2.5 (cache_write) + 800 x 15, per million
    charge = compute_charge(LUNA, parse_usage(from_openai_responses(responses)))
    assert {line.category: line.tokens for line in charge.lines if line.tokens}["cache_write"] == 3000
    claude = AnthropicUsage(
        input_tokens=100,
        cache_read_input_tokens=2000,
        cache_creation_input_tokens=3000,
        cache_creation=CacheCreation(ephemeral_5m_input_tokens=1000, ephemeral_1h_input_tokens=2000),
        output_tokens=500,
        output_tokens_details=OutputTokensDetails(thinking_tokens=200),
        server_tool_use=ServerToolUsage(web_search_requests=1, web_fetch_requests=0),
        service_tier="priority",
    )
    expected = {
        "prompt_tokens": 5100,
        "completion_tokens": 500,
        "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 3000},
        "claude_cache_creation_5_m_tokens": 1000,
        "claude_cache_creation_1_h_tokens": 2000,
        "completion_tokens_details": {"reasoning_tokens": 200},
        "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
        "service_tier": "priority",
    }
    assert from_anthropic(claude) == expected
    assert from_anthropic(BetaUsage.model_validate(claude.model_dump())) == expected
    assert compute_charge(CLAUDE, parse_usage(expected)).amount == Decimal("0.02415")


def test_anthropic_stream_delta_laid_over_its_start() -> None:
    start = AnthropicUsage(
        input_tokens=50,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=4000,
        cache_creation=CacheCreation(ephemeral_5m_input_tokens=0, ephemeral_1h_input_tokens=4000),
        output_tokens=1,
    )
    delta = MessageDeltaUsage(output_tokens=700, cache_creation_input_tokens=4000)
    assert from_anthropic(delta, start=start) == {
        "prompt_tokens": 4050,
        "completion_tokens": 700,
        "prompt_tokens_details": {"cache_write_tokens": 4000},
        "claude_cache_creation_1_h_tokens": 4000,
    }
    # Without its start the delta has no input count and no lifetime: no prompt count.
    assert "prompt_tokens" not in from_anthropic(delta)


def test_as_ledger_usage_converts_recognised_sdk_types_and_refuses_others() -> None:
    responses = ResponseUsage(
        input_tokens=10000,
        input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=8000),
        output_tokens=2100,
        output_tokens_details=ResponseOutputDetails(reasoning_tokens=0),
        total_tokens=12100,
    )
    assert as_ledger_usage(responses) == from_openai_responses(responses)
    claude = AnthropicUsage(input_tokens=10, cache_read_input_tokens=90, output_tokens=1)
    assert as_ledger_usage(claude)["prompt_tokens"] == 100  # never Anthropic's input_tokens as P

    class GatewayUsage(CompletionUsage):  # e.g. a library's subclass of the OpenAI type
        cost: str | None = None

    sub = GatewayUsage(prompt_tokens=3, completion_tokens=1, total_tokens=4, cost="0.1")
    assert as_ledger_usage(sub) == {
        "prompt_tokens": 3,
        "completion_tokens": 1,
        "total_tokens": 4,
        "cost": "0.1",
    }
    mapping = {"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": None}}
    assert as_ledger_usage(mapping) == mapping  # a mapping is sent as given
    with pytest.raises(TypeError, match=r"got builtins\.int"):
        as_ledger_usage(42)
    with pytest.raises(TypeError, match="MessageDeltaUsage is a streamed delta"):
        as_ledger_usage(MessageDeltaUsage(output_tokens=1))
    with pytest.raises(TypeError, match=r"usage\.prompt_tokens_details: openai\.types\.completion_usage"):
        as_ledger_usage({"prompt_tokens": 1, "prompt_tokens_details": PromptTokensDetails(cached_tokens=1)})
    with pytest.raises(ValueError, match="not a JSON number"):
        as_ledger_usage({"prompt_tokens": 1, "completion_tokens": 1, "cost": float("nan")})


@FAST
@given(
    uncached=COUNT,
    read=COUNT,
    w5=COUNT,
    w1=COUNT,
    unlabelled=st.integers(0, 1000),
    output=COUNT,
    total_given=st.booleans(),
    breakdown_given=st.booleans(),
)
def test_anthropic_adapted_usage_is_valid_and_charged_by_hand(
    uncached: int,
    read: int,
    w5: int,
    w1: int,
    unlabelled: int,
    output: int,
    total_given: bool,
    breakdown_given: bool,
) -> None:
    upstream: dict[str, Any] = {
        "input_tokens": uncached,
        "cache_read_input_tokens": read,
        "output_tokens": output,
    }
    if not breakdown_given:
        w5 = w1 = 0
    written = w5 + w1 + (unlabelled if total_given else 0)
    if total_given:
        upstream["cache_creation_input_tokens"] = written
    if breakdown_given:
        upstream["cache_creation"] = {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1}
    usage = parse_usage(from_anthropic(upstream))  # raises if the adapted usage is not valid
    assert usage.prompt_tokens == uncached + read + written
    assert (usage.cached_tokens, usage.cache_write_tokens) == (read, written)
    assert (usage.cache_write_5m, usage.cache_write_1h) == (w5, w1)
    unlabelled_written = written - w5 - w1
    by_hand = (
        uncached * Decimal(3)
        + read * Decimal("0.3")
        + w5 * Decimal("3.75")
        + w1 * Decimal(6)
        + unlabelled_written * Decimal("3.75")
        + output * Decimal(15)
    ) / MILLION
    assert compute_charge(CLAUDE, usage).amount == by_hand


@FAST
@given(prompt=st.integers(0, 1_000_000), output=COUNT, data=st.data())
def test_responses_adapted_usage_is_valid_and_charged_by_hand(
    prompt: int, output: int, data: st.DataObject
) -> None:
    cached = data.draw(st.integers(0, prompt))
    written = data.draw(st.integers(0, prompt - cached))
    reasoning = data.draw(st.integers(0, output))
    upstream = ResponseUsage(
        input_tokens=prompt,
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=written),
        output_tokens=output,
        output_tokens_details=ResponseOutputDetails(reasoning_tokens=reasoning),
        total_tokens=prompt + output,
    )
    usage = parse_usage(from_openai_responses(upstream))
    assert (usage.cached_tokens, usage.cache_write_tokens, usage.reasoning_tokens) == (
        cached,
        written,
        reasoning,
    )
    long = prompt > 272_000
    rate_in, rate_cached, rate_write, rate_out = (
        (Decimal(5), Decimal("0.5"), Decimal(5), Decimal("22.5"))
        if long
        else (Decimal("2.5"), Decimal("0.25"), Decimal("2.5"), Decimal(15))
    )
    by_hand = (
        (prompt - cached - written) * rate_in
        + cached * rate_cached
        + written * rate_write
        + output * rate_out
    ) / MILLION
    charge = compute_charge(LUNA, usage)
    assert charge.tier == ("long_context" if long else "standard")
    assert charge.amount == by_hand


def test_client_imports_nothing_from_the_service() -> None:
    code = (
        "import sys, ledger_client, ledger_client.client, ledger_client.usage\n"
        "server = {'ledger', 'pricing', 'workers', 'msgspec', 'litestar', 'sqlalchemy',\n"
        "          'openai', 'anthropic', 'pydantic'}  # the SDKs are recognised by name only\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in server)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_anthropic_compaction_iterations_are_added_to_every_count() -> None:
    """BetaUsage's compaction entries are not in its top-level counts (the SDK says so): they
    are billed with the message, never dropped."""
    from anthropic.types.beta import BetaUsage

    usage = BetaUsage.model_validate(
        {
            "input_tokens": 1000,
            "output_tokens": 200,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 50,
            "cache_creation": {"ephemeral_5m_input_tokens": 50, "ephemeral_1h_input_tokens": 0},
            "iterations": [
                {
                    "type": "compaction",
                    "input_tokens": 150000,
                    "output_tokens": 3000,
                    "cache_read_input_tokens": 7,
                    "cache_creation_input_tokens": 30,
                    "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 20},
                },
                {
                    "type": "message",
                    "input_tokens": 1000,
                    "output_tokens": 200,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 50,
                },
            ],
        }
    )
    mapped = from_anthropic(usage)
    assert mapped["prompt_tokens"] == (1000 + 100 + 50) + (150000 + 7 + 30)
    assert mapped["completion_tokens"] == 200 + 3000
    assert mapped["prompt_tokens_details"] == {"cached_tokens": 107, "cache_write_tokens": 80}
    assert (mapped["claude_cache_creation_5_m_tokens"], mapped["claude_cache_creation_1_h_tokens"]) == (
        60,
        20,
    )
    assert len(mapped["iterations"]) == 2  # kept as sent too
