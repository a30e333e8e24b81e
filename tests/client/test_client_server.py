"""The gateway client against a real `ledger serve` (subprocess, own database; see conftest).

Amounts by hand, claude-sonnet-4-6 at the contract's example rates (per 1M tokens: input 3,
output 15, highest input-side rate 6): reserving max_input_tokens=1000 and
max_output_tokens=1000 holds 1000 x 6 / 1e6 + 1000 x 15 / 1e6 = 0.021; usage of
500 prompt + 200 completion tokens costs 0.0015 + 0.003 = 0.0045; 500 + 80 costs 0.0027.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from ledger_client import (
    NO_RETRY,
    AsyncLedgerClient,
    Hold,
    InsufficientFunds,
    LedgerClient,
    LedgerError,
    LedgerUnavailable,
    RetryPolicy,
    from_anthropic,
)
from tests.client.conftest import Ledger
from tests.client.faults import AsyncFaults, Faults

MODEL = "claude-sonnet-4-6"
LIMITS = {"max_input_tokens": 1000, "max_output_tokens": 1000}
HELD = Decimal("0.021")
FINAL = {"prompt_tokens": 500, "completion_tokens": 200}
FINAL_COST = Decimal("0.0045")
PARTIAL = {"prompt_tokens": 500, "completion_tokens": 80}
PARTIAL_COST = Decimal("0.0027")
QUICK = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)


class BrokenStream(Exception):
    pass


def aclient(ledger: Ledger, transport: Any = None, retry: RetryPolicy = QUICK) -> AsyncLedgerClient:
    return AsyncLedgerClient(ledger.url, ledger.token, retry=retry, transport=transport, timeout=10)


def client(ledger: Ledger, transport: Any = None, retry: RetryPolicy = QUICK) -> LedgerClient:
    return LedgerClient(ledger.url, ledger.token, retry=retry, transport=transport, timeout=10)


def reserve(c: LedgerClient, ledger: Ledger, account: str, **extra: Any) -> Hold:
    return c.reserve(account, MODEL, price_version=ledger.version, **LIMITS, **extra)


def test_reserve_checkpoint_settle_typed_and_exact(ledger: Ledger) -> None:
    account = ledger.account("1")

    async def run() -> tuple[Hold, Hold, Hold, Any]:
        async with aclient(ledger) as c:
            hold = await c.reserve(account, MODEL, price_version=ledger.version, **LIMITS)
            checked = await c.checkpoint(hold.id, PARTIAL)
            settled = await c.settle(hold.id, FINAL)
            return hold, checked, settled, await c.balance(account)

    hold, checked, settled, balance = asyncio.run(run())
    assert (hold.state, hold.amount, hold.price_version) == ("open", HELD, ledger.version)
    assert isinstance(hold.amount, Decimal)
    assert checked.state == "open" and checked.usage == PARTIAL
    assert checked.expires_at is not None and hold.expires_at is not None
    assert checked.expires_at >= hold.expires_at
    assert settled.state == "settled" and settled.charge is not None
    assert settled.charge.amount == FINAL_COST
    assert [(line.category, line.tokens, line.amount) for line in settled.charge.lines] == [
        ("input", 500, Decimal("0.0015")),
        ("output", 200, Decimal("0.003")),
    ]
    assert settled.released == HELD - FINAL_COST and settled.resolved_by == "gateway"
    assert (balance.balance, balance.held, balance.available) == (1 - FINAL_COST, 0, 1 - FINAL_COST)


def test_release_and_interrupt_sync(ledger: Ledger) -> None:
    account = ledger.account("1")
    with client(ledger) as c:
        released = c.release(reserve(c, ledger, account).id)
        assert (released.state, released.charge, released.released) == ("released", None, HELD)
        assert c.release(released.id).state == "released"  # releasing twice is 200
        hold = reserve(c, ledger, account)
        interrupted = c.interrupt(hold.id, PARTIAL)
        assert (interrupted.state, interrupted.usage) == ("interrupted", PARTIAL)
        assert interrupted.interrupted_at is not None
        assert c.balance(account).held == HELD
        settled = c.settle(hold.id, FINAL)
        assert settled.state == "settled" and settled.charge is not None
        assert settled.charge.amount == FINAL_COST
        assert c.balance(account).balance == 1 - FINAL_COST


def test_insufficient_funds_raises_with_decimal_extras(ledger: Ledger) -> None:
    account = ledger.account("0.02")
    with client(ledger) as c, pytest.raises(InsufficientFunds) as caught:
        reserve(c, ledger, account)
    error = caught.value
    assert (error.status, error.code) == (402, "insufficient_funds")
    assert (error.required, error.available, error.currency) == (HELD, Decimal("0.02"), "USD")
    assert error.reservation["amount"] == "0.021"
    assert ledger.admin("GET", f"/admin/v1/accounts/{account}/balance")["held"] == "0"


def test_refusals_are_ledger_errors_and_never_retried(ledger: Ledger) -> None:
    account = ledger.account("1")
    faults = Faults({})
    with client(ledger, faults) as c:
        hold = reserve(c, ledger, account)
        c.checkpoint(hold.id, FINAL)
        with pytest.raises(LedgerError) as caught:
            c.checkpoint(hold.id, PARTIAL)  # counts may only grow
        assert (caught.value.status, caught.value.code) == (422, "usage_invalid")
        assert caught.value.param == "usage.completion_tokens"
        assert faults.attempts("/usage") == 2  # one each: a 4xx is not retried
        c.settle(hold.id, FINAL)
        with pytest.raises(LedgerError) as caught:
            c.settle(hold.id, PARTIAL)
        assert (caught.value.status, caught.value.code) == (409, "hold_state_conflict")
        with pytest.raises(LedgerError) as caught:
            c.get_hold("00000000-0000-7000-8000-000000000000")
        assert (caught.value.status, caught.value.code) == (404, "hold_not_found")


def test_settle_whose_answer_was_lost_is_retried_to_the_same_answer(ledger: Ledger) -> None:
    account = ledger.account("1")
    faults = AsyncFaults({"/settle": ["lost", "lost"]})

    async def run() -> tuple[Hold, Hold]:
        async with aclient(ledger, faults) as c:
            hold = await c.reserve(account, MODEL, price_version=ledger.version, **LIMITS)
            return await c.settle(hold.id, FINAL), await c.get_hold(hold.id)

    settled, again = asyncio.run(run())
    assert [fault for _, path, fault in faults.sent if path.endswith("/settle")] == [
        "lost",
        "lost",
        "forwarded",
    ]
    assert settled.state == "settled" and settled.charge is not None
    assert settled.charge.amount == FINAL_COST
    assert settled.raw == again.raw
    # Charged once: the first attempt landed, the retries answered its result.
    settles = [t for t in ledger.journal(account) if t["kind"] == "settle"]
    assert len(settles) == 1
    assert ledger.admin("GET", f"/admin/v1/accounts/{account}/balance")["balance"] == str(1 - FINAL_COST)


def test_reserve_whose_answer_was_lost_reuses_its_key(ledger: Ledger) -> None:
    account = ledger.account("1")
    faults = Faults({"/v1/holds": ["lost"]})
    with client(ledger, faults) as c:
        hold = reserve(c, ledger, account)
        assert faults.attempts("/v1/holds") == 2
        assert c.balance(account).held == HELD  # one hold, not two
        assert c.get_hold(hold.id).idempotency_key == hold.idempotency_key


def test_503_and_refused_connections_are_retried(ledger: Ledger) -> None:
    account = ledger.account("1")
    faults = AsyncFaults({"/v1/holds": ["503", "refused"], "/release": ["503"]})

    async def run() -> Hold:
        async with aclient(ledger, faults) as c:
            hold = await c.reserve(account, MODEL, price_version=ledger.version, **LIMITS)
            return await c.release(hold.id)

    assert asyncio.run(run()).state == "released"
    assert [f for _, p, f in faults.sent if p.endswith("/v1/holds")] == ["503", "refused", "forwarded"]
    assert faults.attempts("/release") == 2


def test_retries_are_bounded(ledger: Ledger) -> None:
    account = ledger.account("1")
    faults = Faults({"/v1/holds": ["refused"] * 5, "/balance": ["503"] * 5})
    with client(ledger, faults) as c:
        with pytest.raises(LedgerUnavailable) as caught:
            reserve(c, ledger, account)
        assert caught.value.code == "ledger_unreachable"
        assert faults.attempts("/v1/holds") == QUICK.attempts
        with pytest.raises(LedgerUnavailable) as caught:
            c.balance(account)
        assert (caught.value.status, caught.value.code) == (503, "proxy_503")
        assert faults.attempts("/balance") == QUICK.attempts
    with client(ledger, Faults({"/balance": ["503"]}), retry=NO_RETRY) as c, pytest.raises(LedgerUnavailable):
        c.balance(account)
    assert ledger.admin("GET", f"/admin/v1/accounts/{account}/balance")["held"] == "0"


def test_hold_helper_settles_a_finished_stream(ledger: Ledger) -> None:
    account = ledger.account("1")

    async def run() -> Any:
        async with aclient(ledger) as c:
            async with c.hold(account, MODEL, price_version=ledger.version, **LIMITS) as h:
                for completion in (40, 80):
                    await h.checkpoint({"prompt_tokens": 500, "completion_tokens": completion})
                h.finish(FINAL)
            return h.result

    result = asyncio.run(run())
    assert result.state == "settled" and result.charge.amount == FINAL_COST


def test_hold_helper_on_a_broken_stream_interrupts_then_a_later_settle_bills(ledger: Ledger) -> None:
    account = ledger.account("1")
    sessions: list[Any] = []

    async def run() -> None:
        async with aclient(ledger) as c, c.hold(account, MODEL, price_version=ledger.version, **LIMITS) as h:
            sessions.append(h)
            await h.checkpoint(PARTIAL)
            raise BrokenStream("upstream reset")

    with pytest.raises(BrokenStream):
        asyncio.run(run())
    h = sessions[0]
    assert h.result.state == "interrupted" and h.result.usage == PARTIAL
    assert h.result.charge is None and h.result.interrupted_at is not None
    with client(ledger) as c:
        assert c.balance(account).held == HELD  # still held, awaiting the authoritative usage
        settled = c.settle(h.id, FINAL)
    assert (settled.state, settled.resolved_by) == ("settled", "gateway")
    assert settled.charge is not None and settled.charge.amount == FINAL_COST


def test_hold_helper_on_a_broken_stream_then_the_reconciler_bills_the_usage_seen(ledger: Ledger) -> None:
    account = ledger.account("1")
    with client(ledger) as c:
        with pytest.raises(BrokenStream), c.hold(account, MODEL, price_version=ledger.version, **LIMITS) as h:
            h.checkpoint(PARTIAL)
            raise BrokenStream("client went away")
        assert h.result is not None and h.result.state == "interrupted"
        run = ledger.reconcile()
        assert h.id in [item["hold_id"] for item in run["items"]], run
        resolved = c.get_hold(h.id)
        assert (resolved.state, resolved.resolved_by) == ("settled", "reconciler")
        assert resolved.charge is not None and resolved.charge.amount == PARTIAL_COST
        assert c.balance(account).balance == 1 - PARTIAL_COST
    assert ledger.integrity_ok()


def test_hold_helper_releases_when_nothing_was_produced(ledger: Ledger) -> None:
    account = ledger.account("1")

    async def run() -> Any:
        async with aclient(ledger) as c, c.hold(account, MODEL, price_version=ledger.version, **LIMITS):
            raise BrokenStream("upstream refused before the first token")

    with pytest.raises(BrokenStream):
        asyncio.run(run())
    with client(ledger) as c:
        assert c.balance(account).held == 0 and c.balance(account).balance == 1
        with c.hold(account, MODEL, price_version=ledger.version, **LIMITS) as h:
            pass  # a normal exit without any usage: nothing produced either
        assert h.result is not None and h.result.state == "released"


def test_hold_helper_interrupts_a_cancelled_task(ledger: Ledger) -> None:
    account = ledger.account("1")
    sessions: list[Any] = []

    async def stream(c: AsyncLedgerClient, started: asyncio.Event) -> None:
        async with c.hold(account, MODEL, price_version=ledger.version, **LIMITS) as h:
            sessions.append(h)
            await h.checkpoint(PARTIAL)
            started.set()
            await asyncio.sleep(60)

    async def run() -> None:
        async with aclient(ledger) as c:
            started = asyncio.Event()
            task = asyncio.create_task(stream(c, started))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(run())
    assert sessions[0].result.state == "interrupted" and sessions[0].result.usage == PARTIAL


def test_anthropic_usage_settles_through_the_adapter(ledger: Ledger) -> None:
    account = ledger.account("1")
    upstream = {
        "input_tokens": 100,
        "cache_read_input_tokens": 200,
        "cache_creation_input_tokens": 300,
        "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
        "output_tokens": 50,
    }
    with client(ledger) as c:
        settled = c.settle(reserve(c, ledger, account).id, from_anthropic(upstream))
    assert settled.charge is not None
    # 100 x 3 + 200 x 0.3 + 100 x 3.75 + 200 x 6 + 50 x 15 = 2685 per million
    assert settled.charge.amount == Decimal("0.002685")
    assert {line.category: line.tokens for line in settled.charge.lines} == {
        "input": 100,
        "cached_input": 200,
        "cache_write_5m": 100,
        "cache_write_1h": 200,
        "output": 50,
    }


def test_a_planned_account_quotes_reserves_and_settles_with_its_plan(ledger: Ledger) -> None:
    """A plan of -50 % for the model: every rate halves (input 1.5, output 7.5, highest input 3)."""
    from ledger_client import PlanRef

    plan_id = f"plan-{account_suffix()}"
    ledger.admin(
        "POST",
        "/admin/v1/plans",
        {
            "plan_id": plan_id,
            "currency": "USD",
            "document": {"models": {MODEL: {"adjust_percent": "-50"}}},
            "reason": "client test",
        },
    )
    account = ledger.account("1")
    ledger.admin("PUT", f"/admin/v1/accounts/{account}/plan", {"plan_id": plan_id, "reason": "client test"})
    with client(ledger) as c:
        quote = c.quote(MODEL, usage=FINAL, price_version=ledger.version, account_id=account)
        assert quote.plan == PlanRef(plan_id, 1)
        assert quote.charge.amount == FINAL_COST / 2  # type: ignore[union-attr]
        assert c.quote(MODEL, usage=FINAL, price_version=ledger.version).plan is None
        hold = reserve(c, ledger, account)
        assert hold.plan == PlanRef(plan_id, 1) and hold.amount == HELD / 2
        settled = c.settle(hold.id, FINAL)
        assert settled.charge is not None and settled.charge.amount == FINAL_COST / 2
        assert settled.plan == PlanRef(plan_id, 1)
        with pytest.raises(InsufficientFunds) as caught:
            c.reserve(
                account,
                MODEL,
                price_version=ledger.version,
                max_input_tokens=1000,
                max_output_tokens=64000,
                n=128,
            )
        assert caught.value.plan == {"id": plan_id, "revision": 1}


def account_suffix() -> str:
    import uuid

    return uuid.uuid4().hex[:12]
