"""The client's usage adapters: adapted usage is valid ledger usage, and it costs what the
upstream's own counts say, computed by hand at the contract example's rates.

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
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_client import from_anthropic, from_openai_chat, from_openai_responses
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


class Dumps:
    """Stands in for an SDK's pydantic usage object."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def model_dump(self) -> dict[str, Any]:
        return self.data


def test_sdk_objects_are_accepted() -> None:
    assert from_anthropic(Dumps({"input_tokens": 2, "output_tokens": 1})) == {
        "prompt_tokens": 2,
        "completion_tokens": 1,
    }
    with pytest.raises(TypeError):
        from_openai_chat(42)


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
    reasoning = data.draw(st.integers(0, output))
    upstream = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + output,
    }
    usage = parse_usage(from_openai_responses(upstream))
    long = prompt > 272_000
    rate_in, rate_cached, rate_out = (
        (Decimal(5), Decimal("0.5"), Decimal("22.5"))
        if long
        else (Decimal("2.5"), Decimal("0.25"), Decimal(15))
    )
    by_hand = ((prompt - cached) * rate_in + cached * rate_cached + output * rate_out) / MILLION
    charge = compute_charge(LUNA, usage)
    assert charge.tier == ("long_context" if long else "standard")
    assert charge.amount == by_hand


def test_client_imports_nothing_from_the_service() -> None:
    code = (
        "import sys, ledger_client, ledger_client.client, ledger_client.usage\n"
        "server = {'ledger', 'pricing', 'workers', 'msgspec', 'litestar', 'sqlalchemy'}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in server)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
