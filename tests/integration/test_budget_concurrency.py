"""Budgets under real concurrency: parallel reserves and settles on one budget key.

The service runs as `ledger serve` in a subprocess (the `server` fixture of
test_hold_concurrency); each client thread has its own HTTP connection, released together
by a barrier. The sum of successful reserves never passes the budget, and afterwards the
budget's `held` equals the sum of the key's open holds and `spent` the sum of its charges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, VIEWER, auth
from tests.integration import test_hold_concurrency as hold_concurrency
from tests.integration.test_hold_concurrency import PARALLEL, account, integrity_ok, reserve_body, together

# The fixtures of test_hold_concurrency: a `ledger serve` subprocess (one per module) and a
# funded account in a fresh currency.
server = hold_concurrency.server
funded = hold_concurrency.funded

EACH = Decimal("0.003")  # 1000 x 2/1e6 + 100 x 10/1e6
CHARGE = Decimal("0.0003")  # 100 x 2/1e6 + 10 x 10/1e6
KEY = "proj-parallel"


def set_budget(client: TestClient[Any], account_id: str, amount: Decimal, **fields: Any) -> None:
    r = client.put(
        f"/admin/v1/accounts/{account_id}/budgets/{KEY}",
        json={"amount": str(amount), "period": "daily", "reason": "concurrency test", **fields},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200, r.text


def budget(client: TestClient[Any], account_id: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(
        f"/admin/v1/accounts/{account_id}/budgets/{KEY}", headers=auth(VIEWER)
    ).json()
    return body


def holds_of(client: TestClient[Any], account_id: str) -> list[dict[str, Any]]:
    r = client.get("/admin/v1/holds", params={"account_id": account_id, "limit": 500}, headers=auth(VIEWER))
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def keyed(account_id: str, key: str) -> dict[str, Any]:
    return {**reserve_body(account_id, key), "budget_key": KEY}


@pytest.mark.parametrize("affordable", [13, 1])
def test_parallel_reserves_on_one_key_never_pass_the_budget(
    server: str, client: TestClient[Any], funded: Callable[[str], str], affordable: int
) -> None:
    account_id = funded("1")  # funds are plenty: only the budget limits
    set_budget(client, account_id, EACH * affordable + Decimal("0.0029"))

    def work(http: httpx.Client, i: int) -> tuple[int, str]:
        r = http.post(f"{server}/v1/holds", json=keyed(account_id, f"k{i}"), headers=auth(GATEWAY))
        return r.status_code, r.json()["error"]["code"] if r.status_code != 201 else "created"

    results = Counter(together(PARALLEL, work))
    assert results == {(201, "created"): affordable, (402, "budget_exceeded"): PARALLEL - affordable}
    holds = holds_of(client, account_id)
    assert len(holds) == affordable
    body = budget(client, account_id)
    assert Decimal(body["held"]) == sum(Decimal(h["amount"]) for h in holds) == EACH * affordable
    assert Decimal(body["spent"]) == 0
    assert account(client, account_id)["held"] == EACH * affordable
    integrity_ok(client)


def test_parallel_reserves_settles_and_releases_keep_the_budget_exact(
    server: str, client: TestClient[Any], funded: Callable[[str], str]
) -> None:
    """Reserves race settles and releases of earlier holds on the same key. Every moment's
    spend + held stays within the budget, so the successes are bounded by it; afterwards
    held is exactly the open holds, spent exactly the charges, and the alert fired once."""
    account_id = funded("1")
    budget_amount = Decimal("0.05")
    set_budget(client, account_id, budget_amount, alert_threshold="0.01")  # alert at 0.0005
    earlier = [
        client.post("/v1/holds", json=keyed(account_id, f"e{i}"), headers=auth(GATEWAY)).json()["id"]
        for i in range(10)
    ]
    assert Decimal(budget(client, account_id)["held"]) == 10 * EACH

    def work(http: httpx.Client, i: int) -> tuple[str, int]:
        if i < 6:
            r = http.post(
                f"{server}/v1/holds/{earlier[i]}/settle",
                json={"usage": {"prompt_tokens": 100, "completion_tokens": 10}},
                headers=auth(GATEWAY),
            )
            return "settle", r.status_code
        if i < 10:
            r = http.post(f"{server}/v1/holds/{earlier[i]}/release", headers=auth(GATEWAY))
            return "release", r.status_code
        r = http.post(f"{server}/v1/holds", json=keyed(account_id, f"n{i}"), headers=auth(GATEWAY))
        return "reserve", r.status_code

    results = Counter(together(40, work))
    assert results[("settle", 200)] == 6 and results[("release", 200)] == 4
    created = results[("reserve", 201)]
    assert created + results[("reserve", 402)] == 30
    # With all 10 earlier holds gone, 0.05 takes (0.05 - 0.0018) / 0.003 = 16 new holds; while they
    # were still held, fewer. Never more than the budget allows.
    assert 6 <= created <= 16
    holds = holds_of(client, account_id)
    open_total = sum((Decimal(h["amount"]) for h in holds if h["state"] == "open"), Decimal(0))
    charged = sum((Decimal(h["charge"]["amount"]) for h in holds if h["state"] == "settled"), Decimal(0))
    body = budget(client, account_id)
    assert (
        (Decimal(body["held"]), Decimal(body["spent"]))
        == (open_total, charged)
        == (created * EACH, 6 * CHARGE)
    )
    assert Decimal(body["spent"]) + Decimal(body["held"]) <= budget_amount
    assert body["alert_crossed"] is True and body["alerted_at"] is not None
    metrics = httpx.get(f"{server}/metrics").text
    assert 'ledger_budget_alerts_total{period="daily"} 1.0' in metrics
    integrity_ok(client)
