"""Random sequences of deposits and adjustments over several accounts, against a plain Python model.

After every sequence: each account's balance, its journal's running balances (newest
first) and the whole-ledger integrity check agree with the model. Replays of an
idempotency key must not move money twice.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, VIEWER, assert_integrity, auth, new_id

amounts = st.decimals(min_value=Decimal("-500"), max_value=Decimal("500"), places=12, allow_nan=False).filter(
    lambda d: d != 0
)
operations = st.lists(
    st.tuples(
        st.sampled_from(["deposit", "adjustment", "replay"]),
        st.integers(min_value=0, max_value=2),
        amounts,
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_random_money_movements_match_the_model(client: TestClient[Any], ops: list[Any]) -> None:
    accounts = [new_id("model") for _ in range(3)]
    for account_id in accounts:
        r = client.post("/admin/v1/accounts", json={"account_id": account_id}, headers=auth(FINANCE))
        assert r.status_code == 201
    model: dict[str, Decimal] = dict.fromkeys(accounts, Decimal(0))
    history: dict[str, list[Decimal]] = {a: [] for a in accounts}
    last: tuple[str, str, dict[str, str], dict[str, Any]] | None = None
    for kind, index, amount in ops:
        account_id = accounts[index]
        if kind == "replay":
            if last is None:
                continue
            path, _acct, body, previous = last
            r = client.post(path, json=body, headers=auth(FINANCE))
            assert r.status_code == 200, r.text
            assert r.json() == previous
            continue
        if kind == "deposit":
            amount = abs(amount)
            path = f"/admin/v1/accounts/{account_id}/deposits"
            body = {"idempotency_key": new_id("k"), "amount": f"{amount:f}"}
        else:
            path = f"/admin/v1/accounts/{account_id}/adjustments"
            body = {"idempotency_key": new_id("k"), "amount": f"{amount:f}", "reason": "model test"}
        r = client.post(path, json=body, headers=auth(FINANCE))
        assert r.status_code == 201, r.text
        model[account_id] += amount
        history[account_id].append(model[account_id])
        assert Decimal(r.json()["balance"]) == model[account_id]
        last = (path, account_id, body, r.json())

    for account_id in accounts:
        balance = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
        assert Decimal(balance["balance"]) == model[account_id]
        assert Decimal(balance["available"]) == model[account_id]
        journal = client.get(
            f"/admin/v1/accounts/{account_id}/transactions", params={"limit": 500}, headers=auth(VIEWER)
        ).json()["data"]
        assert [Decimal(t["balance_after"]) for t in journal] == list(reversed(history[account_id]))
        for t in journal:
            assert sum(Decimal(e["amount"]) for e in t["entries"]) == 0
    assert_integrity(client)
