"""A real `ledger serve` (tests/client/server.py) and a real LiteLLM proxy with the ledger hook.

The proxy's models are LiteLLM mocks (`mock_response`: no network), one with a delay for the
concurrency test, one that fails, one whose usage has cached tokens, one whose stream breaks,
and some that forward to a counting fake upstream whose streams break (tests/litellm/proxy.py).
They all map to the ledger model `litellm-mock` (`LEDGER_LITELLM_MODEL_MAP`), published here beside the
contract's example models. The account is the request-metadata field `ledger_account`
(`LEDGER_LITELLM_ACCOUNT_FIELD`): the proxy runs without a database, so it has no virtual
keys or teams, only its master key.

Without litellm installed these tests skip, and fail when `CI` is set.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from tests.client.conftest import Ledger, ledger  # noqa: F401  (the module-scoped fixture)
from tests.litellm.proxy import MASTER_KEY, Proxy, Upstream

LEDGER_MODEL = "litellm-mock"
# Rates per 1M tokens; max_input_tokens kept small so a hold is small and exact to check.
PRICE = {
    "model": LEDGER_MODEL,
    "max_input_tokens": 1000,
    "max_output_tokens": 1000,
    "rates": {"input": "2.5", "cached_input": "0.25", "output": "15"},
}
CACHED_USAGE = {
    "prompt_tokens": 800,
    "completion_tokens": 50,
    "total_tokens": 850,
    "prompt_tokens_details": {"cached_tokens": 600},
}
UPSTREAM_USAGE = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
MOCKS = {
    "mock-chat": {"mock_response": "Hello from the mock"},
    "mock-slow": {"mock_response": "Slow hello", "mock_delay": 2},
    "mock-fail": {"mock_response": "litellm.InternalServerError"},
    "mock-broken-stream": {"mock_response": "Exception: mock_streaming_error"},
    "mock-cached": {
        "mock_response": {
            "id": "chatcmpl-cached",
            "object": "chat.completion",
            "created": 1796000000,
            "model": "gpt-4o",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "cached"}}
            ],
            "usage": CACHED_USAGE,
        }
    },
}


def charge_of(usage: dict[str, Any]) -> Decimal:
    """The contract's charge of a chat usage at PRICE's rates, computed here by hand."""
    rates = {k: Decimal(v) for k, v in PRICE["rates"].items()}  # type: ignore[attr-defined]
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    million = Decimal(1_000_000)
    return (
        (prompt - cached) * rates["input"] / million
        + cached * rates["cached_input"] / million
        + completion * rates["output"] / million
    )


def litellm_required() -> None:
    try:
        import litellm  # noqa: F401
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"litellm is not installed (the dev extra installs litellm[proxy]): {error}")
        pytest.skip("litellm is not installed")


def proxy_config(upstream: str, *, hook: bool = True) -> dict[str, Any]:
    models: list[dict[str, Any]] = [
        {"model_name": name, "litellm_params": {"model": "openai/gpt-4o", "api_key": "sk-none", **params}}
        for name, params in MOCKS.items()
    ]
    models.append(
        {
            "model_name": "counted",
            "litellm_params": {"model": "openai/gpt-4o", "api_key": "sk-none", "api_base": upstream},
        }
    )
    for name in ("break-after-usage", "break-bare"):
        models.append(
            {
                "model_name": name,
                "litellm_params": {"model": f"openai/{name}", "api_key": "sk-none", "api_base": upstream},
            }
        )
    models.append(
        {
            "model_name": "unpriced",
            "litellm_params": {"model": "openai/gpt-4o", "api_key": "sk-none", "mock_response": "never"},
        }
    )
    settings: dict[str, Any] = {"telemetry": False, "num_retries": 0}
    if hook:
        settings["callbacks"] = "ledger_client.litellm.ledger_billing"
    return {
        "model_list": models,
        "litellm_settings": settings,
        "general_settings": {"master_key": MASTER_KEY},
    }


def hook_env(service: Ledger) -> dict[str, str]:
    names = [*MOCKS, "counted", "break-after-usage", "break-bare"]
    return {
        "LEDGER_URL": service.url,
        "LEDGER_GATEWAY_TOKEN": service.token,
        "LEDGER_LITELLM_MODEL_MAP": ",".join(f"{name}={LEDGER_MODEL}" for name in names),
        "LEDGER_LITELLM_ACCOUNT_FIELD": "ledger_account",
    }


@pytest.fixture(scope="module")
def priced(ledger: Ledger) -> Ledger:  # noqa: F811
    """The ledger with `litellm-mock` published (the contract's models kept)."""
    document = {**ledger.document, "models": [*ledger.document["models"], PRICE], "replace": True}
    ledger.admin("POST", "/admin/v1/price-versions", document)
    return ledger


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream(UPSTREAM_USAGE) as fake:
        yield fake


@pytest.fixture(scope="module")
def proxy(priced: Ledger, upstream: Upstream) -> Iterator[Proxy]:
    litellm_required()
    with Proxy(proxy_config(upstream.base), hook_env(priced)) as running:
        yield running
