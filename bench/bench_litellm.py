"""The LiteLLM proxy with the ledger hook beside its own spend tracking; and what the hook costs.

    .venv/bin/python bench/bench_litellm.py [--parallel 50] [--covers 10] [--latency 200]

Starts a real `ledger serve` (tests/client/server.py, own database) and two LiteLLM proxies
on one mock model (`mock_response`, 1 s `mock_delay` for the budget runs, none for latency),
priced alike in both: the ledger's sheet gives `litellm-bench` input 2.5 and output 15 USD
per 1M tokens with `max_input_tokens` 10, and the proxy's model entry carries the same rates
as LiteLLM's custom pricing (`input_cost_per_token`, `output_cost_per_token`). A request
asks `max_tokens=20` and the mock answers 10 prompt + 20 completion tokens, so a hold and a
charge are both 0.000325 USD exactly.

1. Budget: `--parallel` requests at once against a budget that covers `--covers` of them:
   - ledger: the hook on, the wallet holding `covers` x 0.000325;
   - LiteLLM: the hook off, `litellm_settings.max_budget` = the same amount (LiteLLM's own
     budget; virtual-key and team budgets need its database, which this run has not).
   Reported: requests served, the spend each recorded (LiteLLM: the sum of its
   `x-litellm-response-cost` floats; ledger: the account's journal), the exact charge of what
   was served (served x 0.000325, in Decimal), and the spend past the budget.
2. Latency: `--latency` sequential requests through each proxy, alternating, after a warm-up;
   p50 / p99 of the client's wall time with the hook on and off, in the same run.

It asserts nothing; it prints a Markdown table (and `--json`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.litellm.proxy import MASTER_KEY, Proxy  # noqa: E402

MODEL = "bench-mock"
LEDGER_MODEL = "litellm-bench"
PER_REQUEST = Decimal("0.000325")  # 10 x 2.5 / 1e6 + 20 x 15 / 1e6
PRICE = {
    "model": LEDGER_MODEL,
    "max_input_tokens": 10,
    "max_output_tokens": 1000,
    "rates": {"input": "2.5", "output": "15"},
}


def start_ledger() -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.client.server"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready: dict[str, Any] = json.loads(proc.stdout.readline())
    finance = {"Authorization": f"Bearer {ready['finance']}"}
    document = {**ready["document"], "models": [*ready["document"]["models"], PRICE], "replace": True}
    httpx.post(
        ready["url"] + "/admin/v1/price-versions", json=document, headers=finance, timeout=30
    ).raise_for_status()
    return proc, ready


def account(ready: dict[str, Any], deposit: Decimal) -> str:
    finance = {"Authorization": f"Bearer {ready['finance']}"}
    account_id = f"bench-{uuid.uuid4().hex[:10]}"
    httpx.post(
        ready["url"] + "/admin/v1/accounts", json={"account_id": account_id}, headers=finance
    ).raise_for_status()
    httpx.post(
        f"{ready['url']}/admin/v1/accounts/{account_id}/deposits",
        json={"idempotency_key": f"dep-{account_id}", "amount": str(deposit)},
        headers=finance,
    ).raise_for_status()
    return account_id


def config(*, hook: bool, delay: float | None, max_budget: float | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "model": "openai/gpt-4o",
        "api_key": "sk-none",
        "mock_response": "Hello from the bench",
        # LiteLLM's own pricing for this model, the ledger's rates per token (floats: LiteLLM's type).
        "input_cost_per_token": 2.5e-06,
        "output_cost_per_token": 1.5e-05,
    }
    if delay:
        params["mock_delay"] = delay
    settings: dict[str, Any] = {"telemetry": False, "num_retries": 0}
    if hook:
        settings["callbacks"] = "ledger_client.litellm.ledger_billing"
    if max_budget is not None:
        settings["max_budget"] = max_budget
    return {
        "model_list": [{"model_name": MODEL, "litellm_params": params}],
        "litellm_settings": settings,
        "general_settings": {"master_key": MASTER_KEY},
    }


def hook_env(ready: dict[str, Any]) -> dict[str, str]:
    return {
        "LEDGER_URL": ready["url"],
        "LEDGER_GATEWAY_TOKEN": ready["gateway"],
        "LEDGER_LITELLM_MODEL_MAP": f"{MODEL}={LEDGER_MODEL}",
        "LEDGER_LITELLM_ACCOUNT_FIELD": "ledger_account",
    }


def body(account_id: str) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 20,
        "metadata": {"ledger_account": account_id},
    }


async def burst(proxy: Proxy, account_id: str, parallel: int) -> list[tuple[int, str | None]]:
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    limits = httpx.Limits(max_connections=parallel)
    async with httpx.AsyncClient(base_url=proxy.base, headers=headers, timeout=120, limits=limits) as client:

        async def one() -> tuple[int, str | None]:
            r = await client.post("/v1/chat/completions", json=body(account_id))
            return r.status_code, r.headers.get("x-litellm-response-cost")

        return await asyncio.gather(*(one() for _ in range(parallel)))


def budget_runs(ready: dict[str, Any], parallel: int, covers: int) -> list[dict[str, Any]]:
    budget = PER_REQUEST * covers
    rows = []
    with Proxy(config(hook=True, delay=1.0), hook_env(ready)) as proxy:
        wallet = account(ready, budget)
        results = asyncio.run(burst(proxy, wallet, parallel))
        finance = {"Authorization": f"Bearer {ready['finance']}"}
        after = httpx.get(f"{ready['url']}/admin/v1/accounts/{wallet}", headers=finance).json()
        served = sum(1 for status, _ in results if status == 200)
        spent = budget - Decimal(after["balance"])
        rows.append(
            {
                "tracking": "ledger hook (reserve → settle)",
                "served": served,
                "refused": {
                    str(s): sum(1 for r, _ in results if r == s) for s in {r for r, _ in results if r != 200}
                },
                "recorded": str(spent),
                "exact": str(served * PER_REQUEST),
                "over_budget": str(max(Decimal(0), spent - budget)),
                "held_after": after["held"],
            }
        )
    with Proxy(config(hook=False, delay=1.0, max_budget=float(budget)), {}) as proxy:
        results = asyncio.run(burst(proxy, "unused", parallel))
        served = sum(1 for status, _ in results if status == 200)
        costs = [float(cost) for status, cost in results if status == 200 and cost]
        recorded = sum(costs)
        rows.append(
            {
                "tracking": "LiteLLM max_budget + cost map",
                "served": served,
                "refused": {
                    str(s): sum(1 for r, _ in results if r == s) for s in {r for r, _ in results if r != 200}
                },
                "recorded": repr(recorded),
                "exact": str(served * PER_REQUEST),
                "over_budget": str(max(Decimal(0), served * PER_REQUEST - budget)),
                "held_after": "-",
            }
        )
    return rows


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_run(ready: dict[str, Any], requests: int) -> dict[str, Any]:
    wallet = account(ready, Decimal(1000))
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    with (
        Proxy(config(hook=True, delay=None), hook_env(ready)) as on,
        Proxy(config(hook=False, delay=None), {}) as off,
        httpx.Client(headers=headers, timeout=60) as client,
    ):
        samples: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(requests + 20):
            for name, proxy in (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on)):
                started = time.perf_counter()
                r = client.post(proxy.base + "/v1/chat/completions", json=body(wallet))
                elapsed = (time.perf_counter() - started) * 1000
                r.raise_for_status()
                if i >= 20:
                    samples[name].append(elapsed)
    out: dict[str, Any] = {"requests": requests}
    for name, values in samples.items():
        out[name] = {
            "p50_ms": round(statistics.median(values), 2),
            "p99_ms": round(percentile(values, 0.99), 2),
            "mean_ms": round(statistics.fmean(values), 2),
        }
    out["added_p50_ms"] = round(out["on"]["p50_ms"] - out["off"]["p50_ms"], 2)
    out["added_p99_ms"] = round(out["on"]["p99_ms"] - out["off"]["p99_ms"], 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parallel", type=int, default=50)
    parser.add_argument("--covers", type=int, default=10)
    parser.add_argument("--latency", type=int, default=200, help="requests per side (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    proc, ready = start_ledger()
    try:
        rows = budget_runs(ready, args.parallel, args.covers)
        latency = latency_run(ready, args.latency) if args.latency else None
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)
    if args.json:
        print(json.dumps({"budget": rows, "latency": latency}, indent=2))
        return 0
    budget = PER_REQUEST * args.covers
    print(
        f"\n{args.parallel} parallel requests, budget {budget} USD (covers {args.covers} at {PER_REQUEST})\n"
    )
    print("| spend tracking | served | refused | spend recorded | exact charge of served | over budget |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        refused = ", ".join(f"{n} x {s}" for s, n in row["refused"].items()) or "0"
        print(
            f"| {row['tracking']} | {row['served']} | {refused} | {row['recorded']} | {row['exact']} "
            f"| {row['over_budget']} |"
        )
    if latency:
        print(f"\nLatency through the proxy, {latency['requests']} requests per side, alternating (ms)\n")
        print("| hook | p50 | p99 | mean |")
        print("|---|---|---|---|")
        for name in ("off", "on"):
            side = latency[name]
            print(f"| {name} | {side['p50_ms']} | {side['p99_ms']} | {side['mean_ms']} |")
        print(f"\nadded by the hook: p50 {latency['added_p50_ms']} ms, p99 {latency['added_p99_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
