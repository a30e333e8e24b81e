"""Usage objects: the counts read, the defaults, every refusal with its `param`, checkpoints."""

from __future__ import annotations

from typing import Any

import pytest

from pricing.errors import UsageInvalid
from pricing.examples import contract_usage
from pricing.usage import Usage, parse_usage, usage_grows_from


def test_contract_usage_reads_every_count() -> None:
    usage = parse_usage(contract_usage())
    assert (usage.prompt_tokens, usage.completion_tokens) == (12000, 800)
    assert usage.cached_tokens == 2000
    assert usage.cache_write_tokens == 3000
    assert (usage.cache_write_5m, usage.cache_write_1h) == (1000, 2000)
    assert usage.reasoning_tokens == 300
    assert usage.uncached_input_tokens == 7000
    assert usage.other_cache_write_tokens == 0
    assert usage.raw == contract_usage()


def test_minimal_usage_defaults_to_zero() -> None:
    usage = parse_usage({"prompt_tokens": 32, "completion_tokens": 48})
    assert usage == Usage(
        prompt_tokens=32, completion_tokens=48, raw={"prompt_tokens": 32, "completion_tokens": 48}
    )
    assert (usage.cached_tokens, usage.cache_write_tokens, usage.reasoning_tokens) == (0, 0, 0)


def test_cache_write_defaults_to_claude_fields() -> None:
    usage = parse_usage(
        {
            "prompt_tokens": 5000,
            "completion_tokens": 10,
            "claude_cache_creation_5_m_tokens": 1200,
            "claude_cache_creation_1_h_tokens": 300,
        }
    )
    assert usage.cache_write_tokens == 1500
    assert usage.other_cache_write_tokens == 0


def test_nulls_are_absent_and_unknown_fields_are_kept() -> None:
    raw: dict[str, Any] = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": None,
        "prompt_tokens_details": {"cached_tokens": None, "cache_write_tokens": None, "audio_tokens": 7},
        "completion_tokens_details": None,
        "claude_cache_creation_5_m_tokens": None,
        "cost": 0.000316,
        "provider": {"name": "x", "ids": [1, 2]},
    }
    usage = parse_usage(raw)
    assert (usage.cached_tokens, usage.cache_write_tokens, usage.cache_write_5m) == (0, 0, 0)
    assert usage.raw == raw
    # raw is a copy: changing what was sent afterwards does not change what is stored.
    raw["provider"]["ids"].append(3)
    assert usage.raw["provider"]["ids"] == [1, 2]


def _with(path: str, value: object) -> dict[str, Any]:
    raw = contract_usage()
    node: Any = raw
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    return raw


def _without(path: str) -> dict[str, Any]:
    raw = contract_usage()
    node: Any = raw
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    del node[last]
    return raw


REFUSED: list[tuple[str, object, str]] = [
    ("not an object", [1, 2], "usage"),
    ("missing prompt_tokens", _without("prompt_tokens"), "usage.prompt_tokens"),
    ("null prompt_tokens", _with("prompt_tokens", None), "usage.prompt_tokens"),
    ("missing completion_tokens", _without("completion_tokens"), "usage.completion_tokens"),
    ("negative prompt_tokens", _with("prompt_tokens", -1), "usage.prompt_tokens"),
    ("float completion_tokens", _with("completion_tokens", 800.0), "usage.completion_tokens"),
    ("fractional completion_tokens", _with("completion_tokens", 800.5), "usage.completion_tokens"),
    ("bool completion_tokens", _with("completion_tokens", True), "usage.completion_tokens"),
    ("string prompt_tokens", _with("prompt_tokens", "12000"), "usage.prompt_tokens"),
    ("negative total_tokens", _with("total_tokens", -3), "usage.total_tokens"),
    ("float total_tokens", _with("total_tokens", 1.5), "usage.total_tokens"),
    (
        "negative cached_tokens",
        _with("prompt_tokens_details.cached_tokens", -2000),
        "usage.prompt_tokens_details.cached_tokens",
    ),
    (
        "bool cache_write_tokens",
        _with("prompt_tokens_details.cache_write_tokens", False),
        "usage.prompt_tokens_details.cache_write_tokens",
    ),
    (
        "float claude 5m",
        _with("claude_cache_creation_5_m_tokens", 1000.0),
        "usage.claude_cache_creation_5_m_tokens",
    ),
    (
        "negative claude 1h",
        _with("claude_cache_creation_1_h_tokens", -1),
        "usage.claude_cache_creation_1_h_tokens",
    ),
    ("details not an object", _with("prompt_tokens_details", 5), "usage.prompt_tokens_details"),
    (
        "completion details not an object",
        _with("completion_tokens_details", [300]),
        "usage.completion_tokens_details",
    ),
    (
        "W5 + W1 > W",
        _with("prompt_tokens_details.cache_write_tokens", 2999),
        "usage.prompt_tokens_details.cache_write_tokens",
    ),
    ("R + W > P", _with("prompt_tokens", 4999), "usage.prompt_tokens_details.cached_tokens"),
    (
        "reasoning > C",
        _with("completion_tokens_details.reasoning_tokens", 801),
        "usage.completion_tokens_details.reasoning_tokens",
    ),
    ("absurd count", _with("prompt_tokens", 10**13), "usage.prompt_tokens"),
]


@pytest.mark.parametrize(("raw", "param"), [(r, p) for _, r, p in REFUSED], ids=[n for n, _, _ in REFUSED])
def test_refused_usages_name_the_field(raw: object, param: str) -> None:
    with pytest.raises(UsageInvalid) as info:
        parse_usage(raw)
    assert info.value.param == param
    assert info.value.message


def test_r_plus_w_over_p_without_cache_reads_blames_the_write_field() -> None:
    with pytest.raises(UsageInvalid) as info:
        parse_usage(
            {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cache_write_tokens": 11}}
        )
    assert info.value.param == "usage.prompt_tokens_details.cache_write_tokens"
    with pytest.raises(UsageInvalid) as derived:
        parse_usage({"prompt_tokens": 10, "completion_tokens": 1, "claude_cache_creation_1_h_tokens": 11})
    assert derived.value.param == "usage.claude_cache_creation_1_h_tokens"


def test_boundaries_are_valid() -> None:
    # R + W == P, W5 + W1 == W, reasoning == C: all allowed.
    usage = parse_usage(
        {
            "prompt_tokens": 5000,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 3000},
            "completion_tokens_details": {"reasoning_tokens": 300},
            "claude_cache_creation_5_m_tokens": 1000,
            "claude_cache_creation_1_h_tokens": 2000,
        }
    )
    assert usage.uncached_input_tokens == 0


def test_param_prefix_is_used() -> None:
    with pytest.raises(UsageInvalid) as info:
        parse_usage({"prompt_tokens": -1, "completion_tokens": 0}, param_prefix="body.usage")
    assert info.value.param == "body.usage.prompt_tokens"
    with pytest.raises(UsageInvalid) as bare:
        parse_usage({"prompt_tokens": 1}, param_prefix="")
    assert bare.value.param == "completion_tokens"


def test_constructing_an_invalid_usage_is_refused() -> None:
    with pytest.raises(UsageInvalid):
        Usage(prompt_tokens=10, completion_tokens=0, cached_tokens=11)
    with pytest.raises(UsageInvalid):
        Usage(prompt_tokens=10, completion_tokens=0, cache_write_5m=1)  # W defaults to 0 here
    with pytest.raises(UsageInvalid):
        Usage(prompt_tokens=True, completion_tokens=0)


def test_from_counts_matches_parse() -> None:
    built = Usage.from_counts(
        12000,
        800,
        cached_tokens=2000,
        cache_write_tokens=3000,
        reasoning_tokens=300,
        cache_write_5m=1000,
        cache_write_1h=2000,
    )
    parsed = parse_usage(contract_usage())
    for name in (
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "cache_write_tokens",
        "cache_write_5m",
        "cache_write_1h",
        "reasoning_tokens",
    ):
        assert getattr(built, name) == getattr(parsed, name)
    assert parse_usage(built.raw) == built


def test_usage_grows_from() -> None:
    old = parse_usage(contract_usage())
    assert usage_grows_from(old, old) is None
    bigger = parse_usage(_with("completion_tokens", 900))
    assert usage_grows_from(old, bigger) is None
    assert usage_grows_from(bigger, old) == "completion_tokens"
    fewer_reads = parse_usage(_with("prompt_tokens_details.cached_tokens", 1999))
    assert usage_grows_from(old, fewer_reads) == "prompt_tokens_details.cached_tokens"
    less_5m = _with("claude_cache_creation_5_m_tokens", 999)
    assert usage_grows_from(old, parse_usage(less_5m)) == "claude_cache_creation_5_m_tokens"
    # The first field that shrank, in wire order, is named.
    smaller = Usage.from_counts(100, 1)
    assert usage_grows_from(old, smaller) == "prompt_tokens"
