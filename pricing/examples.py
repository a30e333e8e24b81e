"""The contract's example price document and usage, as builtins (illustrative rates, not list prices).

Kept in one place so tests, docs and the API schema's examples all show the same numbers.
Each call returns a fresh copy: callers may mutate it to build invalid variants.
"""

from __future__ import annotations

from typing import Any


def contract_price_document() -> dict[str, Any]:
    """The price document of the contract's "Prices" section."""
    return {
        "currency": "USD",
        "effective_at": "2026-12-01T00:00:00Z",
        "source": "example document: illustrative rates, not list prices",
        "models": [
            {
                "model": "gpt-6-luna",
                "max_input_tokens": 1050000,
                "max_output_tokens": 128000,
                "rates": {"input": "2.5", "cached_input": "0.25", "cache_write": "2.5", "output": "15"},
                "long_context": {
                    "above_input_tokens": 272000,
                    "rates": {"input": "5", "cached_input": "0.5", "cache_write": "5", "output": "22.5"},
                },
            },
            {
                "model": "claude-sonnet-4-6",
                "max_input_tokens": 1000000,
                "max_output_tokens": 128000,
                "rates": {
                    "input": "3",
                    "cached_input": "0.3",
                    "cache_write_5m": "3.75",
                    "cache_write_1h": "6",
                    "output": "15",
                },
            },
        ],
    }


def contract_usage() -> dict[str, Any]:
    """The usage object of the contract's "Charging usage" section."""
    return {
        "prompt_tokens": 12000,
        "completion_tokens": 800,
        "total_tokens": 12800,
        "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 3000},
        "completion_tokens_details": {"reasoning_tokens": 300},
        "claude_cache_creation_5_m_tokens": 1000,
        "claude_cache_creation_1_h_tokens": 2000,
    }
