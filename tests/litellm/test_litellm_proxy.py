"""The ledger hook inside a real LiteLLM proxy, beside a real `ledger serve`; the OpenAI SDK is the client.

Amounts by hand at `litellm-mock`'s rates (per 1M tokens: input 2.5, cached input 0.25,
output 15; max_input_tokens 1000): a request with max_tokens=100 holds
1000 x 2.5 / 1e6 + 100 x 15 / 1e6 = 0.004; a charge is computed here from the answer's
usage (`charge_of`), never read back from the ledger to be compared with itself.
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from tests.client.conftest import Ledger
from tests.litellm.conftest import CACHED_USAGE, UPSTREAM_USAGE, charge_of
from tests.litellm.proxy import MASTER_KEY, Proxy, Upstream

HOLD_AMOUNT = Decimal("0.004")  # max_tokens=100, see the module docstring
MESSAGES = [{"role": "user", "content": "hello"}]


def sdk(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)


def billed(account: str) -> dict[str, Any]:
    return {"metadata": {"ledger_account": account}}


def get_hold(ledger: Ledger, hold_id: str) -> dict[str, Any]:
    r = httpx.get(f"{ledger.url}/v1/holds/{hold_id}", headers={"Authorization": f"Bearer {ledger.token}"})
    assert r.status_code == 200, r.text
    hold: dict[str, Any] = r.json()
    return hold


def holds_of(ledger: Ledger, account: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = ledger.admin("GET", f"/admin/v1/holds?account_id={account}&limit=200")[
        "data"
    ]
    return data


def balance(ledger: Ledger, account: str) -> dict[str, Decimal]:
    raw = ledger.admin("GET", f"/admin/v1/accounts/{account}")
    return {k: Decimal(raw[k]) for k in ("balance", "held", "available")}


def wait_state(ledger: Ledger, hold_id: str, states: set[str], timeout: float = 10) -> dict[str, Any]:
    """The hold once its state is one of `states` (a stream's settle lands just after its end)."""
    deadline = time.monotonic() + timeout
    while True:
        hold = get_hold(ledger, hold_id)
        if hold["state"] in states or time.monotonic() > deadline:
            return hold
        time.sleep(0.05)


def test_a_completion_reserves_and_settles_exactly(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    raw = sdk(proxy).chat.completions.with_raw_response.create(
        model="mock-chat", messages=MESSAGES, max_tokens=100, extra_body=billed(account)
    )
    completion = raw.parse()
    usage = completion.usage.model_dump(exclude_none=True)
    expected = charge_of(usage)
    assert expected > 0

    hold = get_hold(priced, raw.headers["x-ledger-hold-id"])
    assert hold["state"] == "settled" and hold["resolved_by"] == "gateway"
    assert hold["idempotency_key"] == raw.headers["x-litellm-call-id"]
    assert hold["model"] == "litellm-mock" and hold["account_id"] == account
    assert Decimal(hold["amount"]) == HOLD_AMOUNT
    assert hold["reservation"]["output_allowance"] == 100
    assert Decimal(hold["charge"]["amount"]) == expected
    # The ledger's exact figure, as a decimal string, where LiteLLM users look for cost.
    assert Decimal(raw.headers["x-litellm-response-cost"]) == expected
    assert raw.headers["x-ledger-charge"] == hold["charge"]["amount"]
    assert balance(priced, account) == {
        "balance": 1 - expected,
        "held": Decimal(0),
        "available": 1 - expected,
    }


def test_an_empty_wallet_is_402_and_nothing_goes_upstream(
    priced: Ledger, proxy: Proxy, upstream: Upstream
) -> None:
    empty = priced.account("1")
    priced.admin(
        "POST",
        f"/admin/v1/accounts/{empty}/adjustments",
        {"idempotency_key": f"drain-{empty}", "amount": "-1", "reason": "empty the wallet"},
    )
    before = upstream.requests
    with pytest.raises(openai.APIStatusError) as refused:
        sdk(proxy).chat.completions.create(
            model="counted", messages=MESSAGES, max_tokens=100, extra_body=billed(empty)
        )
    assert refused.value.status_code == 402
    assert "exceeds available" in str(refused.value.message), refused.value.message
    assert upstream.requests == before
    assert holds_of(priced, empty) == []

    # The same request on a funded wallet does reach the upstream, and settles its usage.
    funded = priced.account("1")
    raw = sdk(proxy).chat.completions.with_raw_response.create(
        model="counted", messages=MESSAGES, max_tokens=100, extra_body=billed(funded)
    )
    assert upstream.requests == before + 1
    hold = get_hold(priced, raw.headers["x-ledger-hold-id"])
    assert Decimal(hold["charge"]["amount"]) == charge_of(UPSTREAM_USAGE)


@pytest.mark.parametrize(
    ("model", "setup", "status", "code"),
    [
        ("mock-chat", "freeze", 403, "account_frozen"),
        ("unpriced", None, 404, "model_not_found"),
        ("mock-chat", "missing", 404, "account_not_found"),
    ],
)
def test_other_refusals_carry_the_ledger_status(
    priced: Ledger, proxy: Proxy, model: str, setup: str | None, status: int, code: str
) -> None:
    account = priced.account("1")
    if setup == "freeze":
        priced.admin("POST", f"/admin/v1/accounts/{account}/freeze", {"reason": "test"})
    if setup == "missing":
        account = account + "-nobody"
    with pytest.raises(openai.APIStatusError) as refused:
        sdk(proxy).chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=10, extra_body=billed(account)
        )
    assert refused.value.status_code == status
    body: Any = refused.value.body
    assert code in repr(body), body


def test_a_stream_settles_with_its_final_usage_chunk(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    with sdk(proxy).chat.completions.with_streaming_response.create(
        model="mock-chat",
        messages=MESSAGES,
        max_tokens=100,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=billed(account),
    ) as streamed:
        hold_id = streamed.headers["x-ledger-hold-id"]
        chunks = list(streamed.parse())
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and chunks[-1].usage is not None
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from the mock"
    expected = charge_of(usages[0].model_dump(exclude_none=True))

    hold = wait_state(priced, hold_id, {"settled"})
    assert hold["state"] == "settled", hold
    assert Decimal(hold["charge"]["amount"]) == expected
    assert balance(priced, account)["balance"] == 1 - expected


def test_a_failing_model_releases_the_hold(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    with pytest.raises(openai.APIStatusError) as failed:
        sdk(proxy).chat.completions.create(
            model="mock-fail", messages=MESSAGES, max_tokens=100, extra_body=billed(account)
        )
    assert failed.value.status_code == 500
    (hold,) = holds_of(priced, account)
    assert hold["state"] == "released" and hold["charge"] is None
    assert Decimal(hold["released"]) == HOLD_AMOUNT
    assert balance(priced, account) == {"balance": Decimal(1), "held": Decimal(0), "available": Decimal(1)}


def broken_stream(proxy: Proxy, model: str, account: str) -> str:
    """Stream `model` until it breaks; the text received before the break."""
    got: list[str] = []
    with pytest.raises(openai.APIError):
        stream = sdk(proxy).chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=100, stream=True, extra_body=billed(account)
        )
        for chunk in stream:
            got.extend(c.delta.content or "" for c in chunk.choices)
    return "".join(got)


def test_a_stream_that_fails_before_any_output_releases(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    assert broken_stream(proxy, "mock-broken-stream", account) == ""
    (hold,) = holds_of(priced, account)
    hold = wait_state(priced, hold["id"], {"released"})
    assert hold["state"] == "released" and hold["charge"] is None, hold
    assert balance(priced, account) == {"balance": Decimal(1), "held": Decimal(0), "available": Decimal(1)}


def test_a_stream_that_breaks_after_usage_interrupts_with_it(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    assert broken_stream(proxy, "break-after-usage", account) == "partial"
    (hold,) = holds_of(priced, account)
    hold = wait_state(priced, hold["id"], {"interrupted"})
    assert hold["state"] == "interrupted", hold
    assert hold["usage"]["prompt_tokens"] == UPSTREAM_USAGE["prompt_tokens"]
    assert hold["usage"]["completion_tokens"] == UPSTREAM_USAGE["completion_tokens"]
    assert balance(priced, account)["held"] == HOLD_AMOUNT
    # The reconciler settles an interrupted hold with the usage it was given.
    priced.reconcile()
    settled = get_hold(priced, hold["id"])
    assert settled["state"] == "settled" and settled["resolved_by"] == "reconciler"
    assert Decimal(settled["charge"]["amount"]) == charge_of(UPSTREAM_USAGE)


def test_a_stream_that_breaks_with_no_usage_is_left_to_the_reconciler(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    assert broken_stream(proxy, "break-bare", account) == "partial"
    (hold,) = holds_of(priced, account)
    hold = wait_state(priced, hold["id"], {"interrupted"})
    assert hold["state"] == "interrupted" and hold["usage"] is None, hold
    assert balance(priced, account)["held"] == HOLD_AMOUNT
    priced.reconcile()
    released = get_hold(priced, hold["id"])
    assert released["state"] == "released" and released["resolved_by"] == "reconciler"


def test_cached_tokens_are_billed_at_the_cached_rate(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    raw = sdk(proxy).chat.completions.with_raw_response.create(
        model="mock-cached", messages=MESSAGES, max_tokens=100, extra_body=billed(account)
    )
    hold = get_hold(priced, raw.headers["x-ledger-hold-id"])
    # 200 x 2.5 + 600 x 0.25 + 50 x 15, per 1M tokens
    assert charge_of(CACHED_USAGE) == Decimal("0.0014")
    assert Decimal(hold["charge"]["amount"]) == Decimal("0.0014")
    lines = {line["category"]: line for line in hold["charge"]["lines"]}
    assert lines["cached_input"]["tokens"] == 600 and Decimal(lines["cached_input"]["rate"]) == Decimal(
        "0.25"
    )
    assert lines["input"]["tokens"] == 200
    assert Decimal(raw.headers["x-litellm-response-cost"]) == Decimal("0.0014")


def test_fifty_parallel_requests_on_a_wallet_for_ten_never_overspend(priced: Ledger, proxy: Proxy) -> None:
    deposit = HOLD_AMOUNT * 10
    account = priced.account(str(deposit))

    async def one(client: openai.AsyncOpenAI) -> tuple[int, Any]:
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model="mock-slow", messages=MESSAGES, max_tokens=100, extra_body=billed(account)
            )
        except openai.APIStatusError as error:
            return error.status_code, None
        return 200, raw.parse().usage.model_dump(exclude_none=True)

    async def run() -> list[tuple[int, Any]]:
        client = openai.AsyncOpenAI(
            base_url=proxy.base + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=120
        )
        async with client:
            return await asyncio.gather(*(one(client) for _ in range(50)))

    results = asyncio.run(run())
    statuses = sorted({s for s, _ in results})
    served = [usage for status, usage in results if status == 200]
    assert set(statuses) <= {200, 402}, statuses
    # Every reserve lands within the mock's 2 s delay: ten holds fill the wallet, the rest wait
    # for nothing and are refused; none is forwarded without a hold.
    assert len(served) >= 10 and len(served) < 50, len(served)
    expected = sum((charge_of(u) for u in served), Decimal(0))
    holds = holds_of(priced, account)
    assert len(holds) == len(served) and {h["state"] for h in holds} == {"settled"}
    assert sum(Decimal(h["charge"]["amount"]) for h in holds) == expected
    after = balance(priced, account)
    assert after == {"balance": deposit - expected, "held": Decimal(0), "available": deposit - expected}
    assert after["balance"] >= 0
    assert priced.integrity_ok()


def test_a_responses_api_answer_settles_through_the_responses_adapter(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    raw = sdk(proxy).responses.with_raw_response.create(
        model="mock-chat", input="hello", max_output_tokens=100, extra_body=billed(account)
    )
    response = raw.parse()
    assert response.usage is not None
    usage = {"prompt_tokens": response.usage.input_tokens, "completion_tokens": response.usage.output_tokens}
    hold = get_hold(priced, raw.headers["x-ledger-hold-id"])
    assert hold["state"] == "settled" and hold["reservation"]["output_allowance"] == 100
    assert hold["usage"]["prompt_tokens"] == response.usage.input_tokens
    assert Decimal(hold["charge"]["amount"]) == charge_of(usage)


def test_a_call_id_is_billed_once_however_often_a_client_sends_it(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    call_id = f"client-chosen-{account}"

    async def one(client: openai.AsyncOpenAI, after: float) -> int:
        await asyncio.sleep(after)
        try:
            await client.chat.completions.create(
                model="mock-slow",
                messages=MESSAGES,
                max_tokens=100,
                extra_body=billed(account),
                extra_headers={"x-litellm-call-id": call_id},
            )
        except openai.APIStatusError as error:
            return error.status_code
        return 200

    async def run() -> list[int]:
        client = openai.AsyncOpenAI(
            base_url=proxy.base + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60
        )
        async with client:
            return await asyncio.gather(one(client, 0), one(client, 0.5))

    # The second comes while the first waits on the model (2 s): it is refused, and its
    # failure does not release the first's hold.
    assert sorted(asyncio.run(run())) == [200, 409]
    (hold,) = holds_of(priced, account)
    assert hold["idempotency_key"] == call_id and hold["state"] == "settled"
    charged = Decimal(hold["charge"]["amount"])
    # Later: the call id was billed, so it is refused rather than served on the settled hold.
    with pytest.raises(openai.APIStatusError) as again:
        sdk(proxy).chat.completions.create(
            model="mock-chat",
            messages=MESSAGES,
            max_tokens=100,
            extra_body=billed(account),
            extra_headers={"x-litellm-call-id": call_id},
        )
    assert again.value.status_code == 409
    assert len(holds_of(priced, account)) == 1
    assert balance(priced, account) == {"balance": 1 - charged, "held": Decimal(0), "available": 1 - charged}


def test_a_route_the_hook_does_not_bill_is_refused_not_served_free(priced: Ledger, proxy: Proxy) -> None:
    account = priced.account("1")
    with pytest.raises(openai.APIStatusError) as refused:
        sdk(proxy).embeddings.create(model="mock-chat", input="hello", extra_body=billed(account))
    assert refused.value.status_code == 403
    assert "aembedding requests are not billed" in str(refused.value.message), refused.value.message
    assert holds_of(priced, account) == []


def test_a_stream_whose_usage_cannot_be_read_is_refused_not_served_free(priced: Ledger, proxy: Proxy) -> None:
    """A streamed Anthropic-format call (`/v1/messages`) carries no usage the hook can read:
    it is refused before anything is held or sent upstream, instead of being released unbilled."""
    account = priced.account("1")
    r = httpx.post(
        f"{proxy.base}/v1/messages",
        headers={"Authorization": f"Bearer {MASTER_KEY}"},
        json={
            "model": "mock-chat",
            "max_tokens": 50,
            "stream": True,
            "messages": [{"role": "user", "content": "hello"}],
            **billed(account),
        },
        timeout=30,
    )
    assert r.status_code == 403, r.text
    assert "not billed" in r.text, r.text
    assert holds_of(priced, account) == []
