"""The client's request log calls against a real `ledger serve`: a hold by request id, its cost.

Amounts as in test_client_server.py: claude-sonnet-4-6 at the contract's example rates;
500 prompt + 200 completion tokens cost 0.0015 + 0.003 = 0.0045.
"""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import pytest

from ledger_client import NO_RETRY, AsyncLedgerClient, Hold, LedgerClient, LedgerError
from tests.client.conftest import Ledger

MODEL = "claude-sonnet-4-6"
LIMITS = {"max_input_tokens": 1000, "max_output_tokens": 1000}
FINAL = {"prompt_tokens": 500, "completion_tokens": 200}
FINAL_COST = Decimal("0.0045")


def test_hold_by_key_sync_finds_the_request_and_its_cost(ledger: Ledger) -> None:
    account = ledger.account("1")
    key = f"chatcmpl-{uuid.uuid4().hex} /?&#=+%"  # reserved characters: sent encoded
    with LedgerClient(ledger.url, ledger.token, retry=NO_RETRY, timeout=10) as c:
        hold = c.reserve(account, MODEL, idempotency_key=key, price_version=ledger.version, **LIMITS)
        found = c.hold_by_key(account, key)
        assert (found.id, found.state, found.cost) == (hold.id, "open", None)
        settled = c.settle(hold.id, FINAL)
        assert settled.cost == FINAL_COST and isinstance(settled.cost, Decimal)
        found = c.hold_by_key(account, key)
        assert (found.id, found.state, found.cost) == (hold.id, "settled", FINAL_COST)
        released = c.release(c.reserve(account, MODEL, price_version=ledger.version, **LIMITS).id)
        assert released.cost == Decimal(0)
        with pytest.raises(LedgerError) as missing:
            c.hold_by_key(account, key + "-other")
        assert (missing.value.status, missing.value.code) == (404, "hold_not_found")
        with pytest.raises(LedgerError) as invalid:
            c.hold_by_key(account, "")
        assert (invalid.value.status, invalid.value.param) == (422, "idempotency_key")


def test_hold_by_key_async(ledger: Ledger) -> None:
    account = ledger.account("1")
    key = f"req-{uuid.uuid4().hex}"

    async def run() -> tuple[Hold, Hold]:
        async with AsyncLedgerClient(ledger.url, ledger.token, retry=NO_RETRY, timeout=10) as c:
            hold = await c.reserve(
                account, MODEL, idempotency_key=key, price_version=ledger.version, **LIMITS
            )
            await c.settle(hold.id, FINAL)
            return hold, await c.hold_by_key(account, key)

    hold, found = asyncio.run(run())
    assert (found.id, found.idempotency_key, found.cost) == (hold.id, key, FINAL_COST)
