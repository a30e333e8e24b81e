"""The OpenAI and Anthropic SDKs' real usage objects, settled through the client by a real
`ledger serve`, against charges computed here by hand from the contract's table.

Prices: the contract's example document (see conftest) plus one model with a cache-write
rate that differs from its input rate, `gpt-6-sol` (the bundled OpenAI sheet's rates), so a
cache write billed as plain input costs visibly less. The expected charges below never call
the ledger's `pricing` package: `by_hand` is the contract's "Charging usage" table.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest
from anthropic.types import CacheCreation, Message, MessageDeltaUsage, OutputTokensDetails, Usage
from anthropic.types.beta import BetaUsage
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion
from openai.types.completion_usage import CompletionTokensDetails, PromptTokensDetails
from openai.types.create_embedding_response import Usage as EmbeddingUsage
from openai.types.responses import Response, ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails
from openai.types.responses.response_usage import (
    InputTokensDetailsCacheWriteTokensDetails as CacheWriteDetails,
)
from openai.types.responses.response_usage import OutputTokensDetails as ResponseOutputDetails

from ledger_client import AsyncLedgerClient, Hold, LedgerClient, from_anthropic, from_openai_responses
from tests.client.conftest import Ledger
from tests.client.faults import Faults

D = Decimal
MILLION = D(1_000_000)
# Rates per 1M tokens, written out from the documents (not read from the ledger).
RATES: dict[str, dict[str, Decimal]] = {
    "gpt-6-luna": {"input": D("2.5"), "cached_input": D("0.25"), "cache_write": D("2.5"), "output": D(15)},
    "gpt-6-luna/long": {"input": D(5), "cached_input": D("0.5"), "cache_write": D(5), "output": D("22.5")},
    "gpt-6-sol": {"input": D(2), "cached_input": D("0.2"), "cache_write": D("2.5"), "output": D(10)},
    "gpt-6-sol/long": {"input": D(4), "cached_input": D("0.4"), "cache_write": D(5), "output": D(15)},
    "claude-sonnet-4-6": {
        "input": D(3),
        "cached_input": D("0.3"),
        "cache_write_5m": D("3.75"),
        "cache_write_1h": D(6),
        "output": D(15),
    },
}
LONG_ABOVE = {"gpt-6-luna": 272_000, "gpt-6-sol": 272_000}
SOL = {
    "model": "gpt-6-sol",
    "max_input_tokens": 1050000,
    "max_output_tokens": 128000,
    "rates": {"input": "2", "cached_input": "0.2", "cache_write": "2.5", "output": "10"},
    "long_context": {
        "above_input_tokens": 272000,
        "rates": {"input": "4", "cached_input": "0.4", "cache_write": "5", "output": "15"},
    },
}


def by_hand(
    model: str, p: int, c: int, r: int = 0, w: int | None = None, w5: int = 0, w1: int = 0
) -> Decimal:
    """The contract's table: tier by P, then each line tokens x (first rate that exists) / 1e6."""
    long = model in LONG_ABOVE and p > LONG_ABOVE[model]
    rates = RATES[f"{model}/long" if long else model]
    written = w5 + w1 if w is None else w

    def rate(*names: str) -> Decimal:
        return next(rates[name] for name in names if name in rates)

    lines = [
        (p - r - written, rate("input")),
        (r, rate("cached_input", "input")),
        (w5, rate("cache_write_5m", "cache_write", "input")),
        (w1, rate("cache_write_1h", "cache_write", "input")),
        (written - w5 - w1, rate("cache_write", "cache_write_5m", "input")),
        (c, rate("output")),
    ]
    return sum((tokens * per_million for tokens, per_million in lines), D(0)) / MILLION


@pytest.fixture(scope="module")
def version(ledger: Ledger) -> str:
    """A version pricing the contract's two models and gpt-6-sol, active from now."""
    document = {**ledger.document, "models": [*ledger.document["models"], SOL]}
    published: str = ledger.admin("POST", "/admin/v1/price-versions", document)["version"]
    return published


def client(ledger: Ledger, transport: Any = None) -> LedgerClient:
    return LedgerClient(ledger.url, ledger.token, transport=transport, timeout=10)


def settle(ledger: Ledger, version: str, model: str, usage: object) -> Hold:
    """Reserve on a fresh account, settle `usage` (as given) and check the balance moved by the charge."""
    account = ledger.account("100")
    with client(ledger) as c:
        hold = c.reserve(account, model, price_version=version, max_output_tokens=4000)
        settled = c.settle(hold.id, usage)
        assert settled.state == "settled" and settled.charge is not None
        assert c.balance(account).balance == 100 - settled.charge.amount
    return settled


def lines(hold: Hold) -> dict[str, int]:
    assert hold.charge is not None
    return {line.category: line.tokens for line in hold.charge.lines if line.tokens}


# --- OpenAI chat completions -------------------------------------------------------------


def test_raw_chat_completion_usage_with_cache_read_write_and_reasoning(ledger: Ledger, version: str) -> None:
    usage = CompletionUsage(
        prompt_tokens=12000,
        completion_tokens=800,
        total_tokens=12800,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=2000, cache_write_tokens=3000, audio_tokens=0
        ),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=300, audio_tokens=None),
    )
    settled = settle(ledger, version, "gpt-6-sol", usage)
    assert settled.charge is not None
    # 7000 x 2 + 2000 x 0.2 + 3000 x 2.5 + 800 x 10 = 29900 per million
    assert settled.charge.amount == by_hand("gpt-6-sol", 12000, 800, r=2000, w=3000) == D("0.0299")
    assert lines(settled) == {"input": 7000, "cached_input": 2000, "cache_write": 3000, "output": 800}
    assert settled.usage is not None
    assert settled.usage["completion_tokens_details"] == {"reasoning_tokens": 300}


def test_chat_completion_parsed_from_a_response_body_long_context(ledger: Ledger, version: str) -> None:
    body = {
        "id": "chatcmpl-C7x2",
        "object": "chat.completion",
        "created": 1796601600,
        "model": "gpt-6-luna",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Summary: ...", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 300000,
            "completion_tokens": 1500,
            "total_tokens": 301500,
            "prompt_tokens_details": {
                "cached_tokens": 250000,
                "cache_write_tokens": 40000,
                "audio_tokens": 0,
            },
            "completion_tokens_details": {
                "reasoning_tokens": 1000,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_5e1f",
    }
    usage = ChatCompletion.model_validate(body).usage
    assert isinstance(usage, CompletionUsage)
    settled = settle(ledger, version, "gpt-6-luna", usage)
    assert settled.charge is not None and settled.charge.tier == "long_context"
    # 10000 x 5 + 250000 x 0.5 + 40000 x 5 + 1500 x 22.5 = 408750 per million
    assert settled.charge.amount == by_hand("gpt-6-luna", 300000, 1500, r=250000, w=40000)
    assert settled.charge.amount == D("0.40875")


# --- OpenAI Responses --------------------------------------------------------------------


RESPONSES_BODY: dict[str, Any] = {
    "id": "resp_68c1f0a2b3",
    "object": "response",
    "created_at": 1796601600,
    "status": "completed",
    "model": "gpt-6-sol",
    "output": [
        {
            "type": "message",
            "id": "msg_68c1f0a2b4",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        }
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "temperature": 1.0,
    "top_p": 1.0,
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "metadata": {},
    "usage": {
        "input_tokens": 10000,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 8000},
        "output_tokens": 2100,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12100,
    },
}


def test_responses_cache_writes_are_charged_at_the_cache_write_rate(ledger: Ledger, version: str) -> None:
    """The issue's case: 8,000 cache-write tokens were billed as input (0.041 instead of 0.045)."""
    usage = Response.model_validate(RESPONSES_BODY).usage
    assert isinstance(usage, ResponseUsage)
    expected = by_hand("gpt-6-sol", 10000, 2100, w=8000)  # 2000 x 2 + 8000 x 2.5 + 2100 x 10
    assert expected == D("0.045")
    for given in (from_openai_responses(usage), usage):  # through the adapter, and raw
        settled = settle(ledger, version, "gpt-6-sol", given)
        assert settled.charge is not None and settled.charge.amount == expected
        assert lines(settled) == {"input": 2000, "cache_write": 8000, "output": 2100}


def test_responses_long_context_with_cache_read_write_and_reasoning(ledger: Ledger, version: str) -> None:
    usage = ResponseUsage(
        input_tokens=400000,
        input_tokens_details=InputTokensDetails(
            cached_tokens=300000,
            cache_write_tokens=60000,
            cache_write_tokens_details=CacheWriteDetails(ttl_30m_tokens=60000, ttl_12h_tokens=0),
        ),
        output_tokens=5000,
        output_tokens_details=ResponseOutputDetails(reasoning_tokens=4000),
        total_tokens=405000,
    )
    settled = settle(ledger, version, "gpt-6-sol", usage)
    assert settled.charge is not None and settled.charge.tier == "long_context"
    # 40000 x 4 + 300000 x 0.4 + 60000 x 5 + 5000 x 15 = 655000 per million
    assert settled.charge.amount == by_hand("gpt-6-sol", 400000, 5000, r=300000, w=60000) == D("0.655")
    assert settled.usage is not None
    assert settled.usage["prompt_tokens_details"]["cache_write_tokens_details"] == {
        "ttl_30m_tokens": 60000,
        "ttl_12h_tokens": 0,
    }


# --- Anthropic ---------------------------------------------------------------------------


def test_raw_anthropic_usage_with_5m_and_1h_writes_and_cache_reads(ledger: Ledger, version: str) -> None:
    usage = Usage(
        input_tokens=100,
        cache_read_input_tokens=2000,
        cache_creation_input_tokens=3000,
        cache_creation=CacheCreation(ephemeral_5m_input_tokens=1000, ephemeral_1h_input_tokens=2000),
        output_tokens=500,
        output_tokens_details=OutputTokensDetails(thinking_tokens=200),
        service_tier="standard",
    )
    settled = settle(ledger, version, "claude-sonnet-4-6", usage)
    assert settled.charge is not None
    # P = 100 + 2000 + 3000 (Anthropic's input_tokens excludes the cache): never 100 as P.
    # 100 x 3 + 2000 x 0.3 + 1000 x 3.75 + 2000 x 6 + 500 x 15 = 24150 per million
    expected = by_hand("claude-sonnet-4-6", 5100, 500, r=2000, w=3000, w5=1000, w1=2000)
    assert settled.charge.amount == expected == D("0.02415")
    assert lines(settled) == {
        "input": 100,
        "cached_input": 2000,
        "cache_write_5m": 1000,
        "cache_write_1h": 2000,
        "output": 500,
    }
    assert settled.usage is not None
    assert settled.usage["completion_tokens_details"] == {"reasoning_tokens": 200}
    assert settled.usage["service_tier"] == "standard"


def test_anthropic_message_parsed_from_a_response_body_and_beta_usage(ledger: Ledger, version: str) -> None:
    body = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 40,
            "cache_creation_input_tokens": 9000,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 9000},
            "output_tokens": 60,
            "service_tier": "standard",
            "server_tool_use": None,
        },
    }
    usage = Message.model_validate(body).usage
    # 40 x 3 + 9000 x 6 + 60 x 15 = 55020 per million: the 1-hour rate, not the 5-minute one
    expected = by_hand("claude-sonnet-4-6", 9040, 60, w=9000, w1=9000)
    assert expected == D("0.05502")
    for given in (usage, BetaUsage.model_validate(body["usage"])):
        settled = settle(ledger, version, "claude-sonnet-4-6", given)
        assert settled.charge is not None and settled.charge.amount == expected
        assert lines(settled) == {"input": 40, "cache_write_1h": 9000, "output": 60}


def test_anthropic_stream_start_and_delta_through_the_hold_helper(ledger: Ledger, version: str) -> None:
    """A stream's message_start usage carries the cache breakdown; message_delta the final counts."""
    start = Usage(
        input_tokens=50,
        cache_read_input_tokens=1000,
        cache_creation_input_tokens=4000,
        cache_creation=CacheCreation(ephemeral_5m_input_tokens=0, ephemeral_1h_input_tokens=4000),
        output_tokens=1,
    )
    deltas = [
        MessageDeltaUsage(output_tokens=120),
        MessageDeltaUsage(
            output_tokens=700,
            input_tokens=50,
            cache_read_input_tokens=1000,
            cache_creation_input_tokens=4000,
        ),
    ]
    account = ledger.account("100")

    async def run() -> Any:
        async with AsyncLedgerClient(ledger.url, ledger.token, timeout=10) as c:
            async with c.hold(
                account, "claude-sonnet-4-6", price_version=version, max_output_tokens=4000
            ) as h:
                for delta in deltas:
                    await h.checkpoint(from_anthropic(delta, start=start))
                h.finish(from_anthropic(deltas[-1], start=start))
            return h.result

    settled = asyncio.run(run())
    # 50 x 3 + 1000 x 0.3 + 4000 x 6 + 700 x 15 = 34950 per million
    expected = by_hand("claude-sonnet-4-6", 5050, 700, r=1000, w=4000, w1=4000)
    assert settled.charge.amount == expected == D("0.03495")
    with client(ledger) as c, pytest.raises(TypeError, match="MessageDeltaUsage"):
        c.settle(settled.id, deltas[-1])  # alone, the delta has no breakdown: refused, not guessed


def test_hold_helper_takes_sdk_objects(ledger: Ledger, version: str) -> None:
    account = ledger.account("100")
    with client(ledger) as c:
        with c.hold(account, "gpt-6-sol", price_version=version, max_output_tokens=4000) as h:
            h.checkpoint(CompletionUsage(prompt_tokens=10000, completion_tokens=10, total_tokens=10010))
            h.finish(Response.model_validate(RESPONSES_BODY).usage)
        assert h.result is not None and h.result.charge is not None
        assert h.result.charge.amount == by_hand("gpt-6-sol", 10000, 2100, w=8000)


# --- What the client refuses --------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "named"),
    [
        (object(), "builtins.object"),
        (EmbeddingUsage(prompt_tokens=5, total_tokens=5), "openai.types.create_embedding_response.Usage"),
        (MessageDeltaUsage(output_tokens=5, input_tokens=3), "MessageDeltaUsage is a streamed delta"),
        ({"prompt_tokens": 10, "completion_tokens": D(1)}, "usage.completion_tokens: decimal.Decimal"),
    ],
    ids=["object", "unknown-sdk-type", "anthropic-delta", "decimal-in-mapping"],
)
def test_unaccepted_usage_is_a_type_error_and_nothing_is_sent(
    ledger: Ledger, version: str, usage: object, named: str
) -> None:
    account = ledger.account("100")
    faults = Faults({})
    with client(ledger, faults) as c:
        hold = c.reserve(account, "gpt-6-sol", price_version=version, max_output_tokens=4000)
        for call in (c.settle, c.checkpoint, c.interrupt):
            with pytest.raises(TypeError) as caught:
                call(hold.id, usage)
            message = str(caught.value)
            assert named in message, message
            if not isinstance(usage, MessageDeltaUsage):  # says what is accepted
                assert "openai CompletionUsage or ResponseUsage, anthropic Usage or BetaUsage" in message
        assert [path for _, path, _ in faults.sent] == ["/v1/holds"]  # the reserve, nothing after it
        assert c.get_hold(hold.id).state == "open"
        assert (c.balance(account).held, c.balance(account).balance) == (hold.amount, D(100))
