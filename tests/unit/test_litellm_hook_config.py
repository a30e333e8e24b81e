"""The LiteLLM hook's pure decisions (ledger_client._litellm_config): settings, account, limits, usage.

The proxy itself is exercised in tests/litellm/; here each rule is pinned by its own case,
including the usage shapes of the routes the proxy tests do not drive (Responses, Anthropic).
"""

from __future__ import annotations

from typing import Any

import pytest

from ledger_client._litellm_config import (
    HookSettings,
    from_litellm_chat,
    ledger_usage,
    parse_model_map,
    reserve_limits,
    resolve_account,
)

SETTINGS = HookSettings(url="http://ledger", token="t", account_field="ledger_account")


def test_model_map_reads_json_or_pairs_and_refuses_anything_else() -> None:
    assert parse_model_map('{"gpt-4o": "gpt-6-luna"}') == {"gpt-4o": "gpt-6-luna"}
    assert parse_model_map(" a=b , c = d ") == {"a": "b", "c": "d"}
    assert parse_model_map("") == {}
    with pytest.raises(ValueError):
        parse_model_map("a")
    with pytest.raises(ValueError):
        parse_model_map('{"a": 1}')


def test_settings_from_env_need_url_and_token() -> None:
    with pytest.raises(ValueError, match="LEDGER_GATEWAY_TOKEN"):
        HookSettings.from_env({"LEDGER_URL": "http://ledger"})
    settings = HookSettings.from_env(
        {
            "LEDGER_URL": "http://ledger",
            "LEDGER_GATEWAY_TOKEN": "tok",
            "LEDGER_LITELLM_MODEL_MAP": "x=y",
            "LEDGER_LITELLM_ACCOUNT_FIELD": "acct",
            "LEDGER_LITELLM_HOLD_TTL_SECONDS": "120",
        }
    )
    assert (settings.model_map, settings.account_field, settings.ttl_seconds) == ({"x": "y"}, "acct", 120)


@pytest.mark.parametrize(
    ("data", "team", "user", "expected"),
    [
        (
            {"metadata": {"ledger_account": "acme"}},
            "team-1",
            "u-1",
            ("acme", "request metadata.ledger_account"),
        ),
        (
            {"litellm_metadata": {"ledger_account": "acme"}},
            None,
            None,
            ("acme", "request litellm_metadata.ledger_account"),
        ),
        ({"metadata": {}}, "team-1", "u-1", ("team-1", "key team")),
        ({}, None, "u-1", ("u-1", "key user")),
        ({"metadata": {"ledger_account": ""}}, "", None, (None, "none")),
    ],
)
def test_the_account_comes_from_the_field_then_the_team_then_the_user(
    data: dict[str, Any], team: str | None, user: str | None, expected: tuple[str | None, str]
) -> None:
    assert resolve_account(SETTINGS, data, team, user) == expected


def test_without_an_account_field_request_metadata_is_ignored() -> None:
    plain = HookSettings(url="http://ledger", token="t")
    assert resolve_account(plain, {"metadata": {"ledger_account": "acme"}}, "team-1", None) == (
        "team-1",
        "key team",
    )


def test_the_reserve_takes_the_request_output_limit_and_n() -> None:
    assert reserve_limits({"max_completion_tokens": 50, "max_tokens": 80, "n": 2}) == {
        "max_output_tokens": 50,
        "n": 2,
    }
    assert reserve_limits({"max_tokens": 80}) == {"max_output_tokens": 80}
    assert reserve_limits({"max_output_tokens": 9}) == {"max_output_tokens": 9}
    assert reserve_limits({}) == {}
    for bad in ({"max_tokens": 0}, {"n": 1.5}, {"max_tokens": "10"}):
        with pytest.raises(ValueError):
            reserve_limits(bad)


def test_litellm_chat_usage_drops_the_float_cost_and_names_cache_writes() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "total_tokens": 110,
        "cost": 0.000123,
        "prompt_tokens_details": {
            "cached_tokens": 20,
            "cache_creation_tokens": 30,
            "cache_creation_token_details": {
                "ephemeral_5m_input_tokens": 10,
                "ephemeral_1h_input_tokens": 20,
            },
        },
    }
    assert from_litellm_chat(usage) == {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "total_tokens": 110,
        "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 30},
        "claude_cache_creation_5_m_tokens": 10,
        "claude_cache_creation_1_h_tokens": 20,
    }


def test_each_route_uses_its_adapter() -> None:
    responses = {
        "input_tokens": 50,
        "output_tokens": 5,
        "input_tokens_details": {"cached_tokens": 10},
        "cost": 1.0,
    }
    assert ledger_usage("aresponses", responses) == {
        "prompt_tokens": 50,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 10},
    }
    anthropic = {
        "input_tokens": 40,
        "output_tokens": 5,
        "cache_read_input_tokens": 10,
        "cache_creation_input_tokens": 0,
    }
    assert ledger_usage("anthropic_messages", anthropic)["prompt_tokens"] == 50
    assert ledger_usage("acompletion", {"prompt_tokens": 3, "completion_tokens": 4}) == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
    }
