"""Throughput of the pure pricing engine: charges and reservations per second, in-process.

Run by hand: ``python bench/bench_pricing.py`` (``--json`` for machine-readable output,
``--runs`` / ``--seconds`` / ``--seed`` to change the method). Not part of ``make test``:
it asserts nothing and its numbers depend on the machine.

Method: a fixed, seeded mix of realistic usage objects (short chats, cached agent
turns, Claude 5m/1h cache writes, GPT-6 long-context prompts, reasoning tokens) is
built over the bundled price sheets. Each run loops over the mix for `--seconds`
seconds and counts operations; the report gives the median rate over the runs, the
slowest and fastest run, and the spread ((max - min) / median). Measured operations:

- ``charge``: ``parse_usage`` of the wire object + ``compute_charge`` (what a settle does);
- ``charge_wire``: the same plus ``charge_to_builtins`` (what a settle stores and answers);
- ``reserve``: ``size_reservation`` with a mix of request limits (what a reserve does).

On a 2-core machine compare the ratios within one run rather than absolute numbers
across runs; the process CPU time is reported to show the benchmark had a core.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import pricing  # noqa: F401
except ModuleNotFoundError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pricing.bundled import bundled_document
from pricing.document import ModelPrice
from pricing.engine import charge_to_builtins, compute_charge, size_reservation
from pricing.usage import parse_usage


def usage_mix(prices: list[ModelPrice], size: int, seed: int) -> list[tuple[ModelPrice, dict[str, Any]]]:
    """`size` (price, wire usage) pairs in a fixed pseudo-random mix of request shapes."""
    rng = random.Random(seed)
    mix: list[tuple[ModelPrice, dict[str, Any]]] = []
    for _ in range(size):
        price = rng.choice(prices)
        shape = rng.random()
        if shape < 0.45:  # short chat
            prompt, completion, cached, written = rng.randint(20, 4000), rng.randint(10, 1200), 0, None
        elif shape < 0.80:  # agent turn with a warm cache
            prompt = rng.randint(8000, 200_000)
            cached = int(prompt * rng.uniform(0.5, 0.95))
            written = rng.randint(0, prompt - cached)
            completion = rng.randint(50, 8000)
        else:  # long prompt, long context where the model has it
            limit = price.max_input_tokens
            prompt = rng.randint(min(limit, 272_001), limit)
            cached = rng.randint(0, prompt // 2)
            written = None
            completion = rng.randint(100, 16000)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "completion_tokens_details": {"reasoning_tokens": rng.randint(0, completion)},
        }
        details: dict[str, Any] = {}
        if cached:
            details["cached_tokens"] = cached
        if price.model.startswith("claude") and written:
            w5 = rng.randint(0, written)
            usage["claude_cache_creation_5_m_tokens"] = w5
            usage["claude_cache_creation_1_h_tokens"] = written - w5
        elif written is not None:
            details["cache_write_tokens"] = written
        if details:
            usage["prompt_tokens_details"] = details
        mix.append((price, usage))
    return mix


def measure(operation: Callable[[int], None], seconds: float) -> int:
    """Operations per second of `operation(i)` over about `seconds` seconds."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(256):
            operation(done)
            done += 1
        now = time.perf_counter()
        if now >= deadline:
            return int(done / (now - start))


def summary(rates: list[int]) -> dict[str, Any]:
    median = statistics.median(rates)
    return {
        "median_per_second": int(median),
        "min_per_second": min(rates),
        "max_per_second": max(rates),
        "spread_pct": round(100 * (max(rates) - min(rates)) / median, 1),
        "per_run": rates,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of each run")
    parser.add_argument("--mix", type=int, default=2000, help="number of distinct usages in the mix")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)

    doc = bundled_document()
    prices = list(doc.models)
    mix = usage_mix(prices, args.mix, args.seed)
    parsed = [(price, parse_usage(raw)) for price, raw in mix]
    rng = random.Random(args.seed + 1)
    requests = [
        (
            rng.choice(prices),
            rng.choice([None, rng.randint(1000, 300_000), 10_000_000]),
            rng.choice([None, 256, 4096, 64_000]),
            rng.choice([None, 1, 2]),
        )
        for _ in range(args.mix)
    ]
    size = len(mix)

    def charge(i: int) -> None:
        price, raw = mix[i % size]
        compute_charge(price, parse_usage(raw))

    def charge_wire(i: int) -> None:
        price, raw = mix[i % size]
        charge_to_builtins(compute_charge(price, parse_usage(raw)))

    def reserve(i: int) -> None:
        price, max_input, max_output, n = requests[i % size]
        size_reservation(price, max_input_tokens=max_input, max_output_tokens=max_output, n=n)

    operations = {"charge": charge, "charge_wire": charge_wire, "reserve": reserve}
    for op in operations.values():  # warm up
        measure(op, min(0.2, args.seconds))
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    rates: dict[str, list[int]] = {name: [] for name in operations}
    for _ in range(args.runs):
        for name, op in operations.items():
            rates[name].append(measure(op, args.seconds))
    cpu, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start
    tiers = sum(1 for price, usage in parsed if compute_charge(price, usage).tier == "long_context")

    report = {
        "benchmark": "pricing engine (pure, in-process)",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "runs": args.runs,
        "seconds_per_run": args.seconds,
        "mix": {
            "usages": size,
            "models": len(prices),
            "long_context_share_pct": round(100 * tiers / size, 1),
        },
        "cpu_seconds": round(cpu, 2),
        "wall_seconds": round(wall, 2),
        "results": {name: summary(values) for name, values in rates.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    long_share = report["mix"]["long_context_share_pct"]
    print(
        f"{report['benchmark']}: {args.runs} runs x {args.seconds} s per operation,"
        f" python {report['python']}, mix of {size} usages over {len(prices)} models"
        f" ({long_share}% long context)"
    )
    labels = {
        "charge": "parse_usage + compute_charge",
        "charge_wire": "  ... + charge_to_builtins",
        "reserve": "size_reservation",
    }
    for name, result in report["results"].items():
        print(
            f"  {labels[name]:<30} median {result['median_per_second']:>9,}/s"
            f"   min {result['min_per_second']:>9,}  max {result['max_per_second']:>9,}"
            f"   spread {result['spread_pct']}%"
        )
    print(f"  cpu {report['cpu_seconds']} s over {report['wall_seconds']} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
