"""Stateful property test: random reserve / checkpoint / settle / interrupt / release / deposit
sequences over several accounts, against a plain Python model of the rules.

Prices (a currency of its own): input 2, output 10 per 1M, max input 1000, max
output 500. Usage above those limits (prompt > 1000, completion > 500 x n) is
refused with 422, and a hold with usage seen cannot be released (409). The model
computes every amount itself with exact Decimals, and after
each step checks balance, held and available of every account, the state of every
hold, and (at teardown) the whole-ledger integrity check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule
from litestar.testing import TestClient

from tests.conftest import FINANCE, GATEWAY, VIEWER, auth, fresh_currency, new_id, publish, simple_document

M = Decimal(1_000_000)


def reservation(max_output: int, n: int) -> Decimal:
    return Decimal(1000 * 2) / M + Decimal(max_output * n * 10) / M


def charge(p: int, c: int) -> Decimal:
    return Decimal(p * 2) / M + Decimal(c * 10) / M


@dataclass
class ModelHold:
    account: str
    amount: Decimal
    n: int = 1
    state: str = "open"
    seen: tuple[int, int] | None = None
    settled_with: tuple[int, int] | None = None


@dataclass
class ModelAccount:
    balance: Decimal = Decimal(0)
    held: Decimal = Decimal(0)
    holds: list[str] = field(default_factory=list)


class HoldMachine(RuleBasedStateMachine):
    client: TestClient[Any]
    currency: str

    holds = Bundle("holds")

    def __init__(self) -> None:
        super().__init__()
        self.accounts: dict[str, ModelAccount] = {}
        self.model_holds: dict[str, ModelHold] = {}
        self.names: list[str] = []

    @initialize()
    def open_accounts(self) -> None:
        for _ in range(3):
            account_id = new_id("sm")
            r = self.client.post(
                "/admin/v1/accounts",
                json={"account_id": account_id, "currency": self.currency},
                headers=auth(FINANCE),
            )
            assert r.status_code == 201
            self.accounts[account_id] = ModelAccount()
            self.names.append(account_id)

    @rule(which=st.integers(0, 2), amount=st.decimals(Decimal("0.000001"), Decimal("0.02"), places=6))
    def deposit(self, which: int, amount: Decimal) -> None:
        account_id = self.names[which]
        r = self.client.post(
            f"/admin/v1/accounts/{account_id}/deposits",
            json={"idempotency_key": new_id("d"), "amount": f"{amount}"},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
        self.accounts[account_id].balance += amount

    @rule(target=holds, which=st.integers(0, 2), max_output=st.integers(1, 500), n=st.integers(1, 3))
    def reserve(self, which: int, max_output: int, n: int) -> str:
        account_id = self.names[which]
        acct = self.accounts[account_id]
        amount = reservation(max_output, n)
        r = self.client.post(
            "/v1/holds",
            json={
                "account_id": account_id,
                "idempotency_key": new_id("r"),
                "model": "t-simple",
                "max_output_tokens": max_output,
                "n": n,
            },
            headers=auth(GATEWAY),
        )
        if acct.balance - acct.held >= amount:
            assert r.status_code == 201, r.text
            assert Decimal(r.json()["amount"]) == amount
            hold_id: str = r.json()["id"]
            self.model_holds[hold_id] = ModelHold(account_id, amount, n)
            acct.held += amount
            return hold_id
        assert r.status_code == 402, r.text
        assert Decimal(r.json()["error"]["required"]) == amount
        return "none"

    def _usage(self, p: int, c: int) -> dict[str, Any]:
        return {"usage": {"prompt_tokens": p, "completion_tokens": c}}

    @staticmethod
    def _over_limits(h: ModelHold, p: int, c: int) -> bool:
        return p > 1000 or c > 500 * h.n

    @rule(hold=holds, p=st.integers(0, 1500), c=st.integers(0, 1500))
    def checkpoint(self, hold: str, p: int, c: int) -> None:
        if hold == "none":
            return
        h = self.model_holds[hold]
        r = self.client.post(f"/v1/holds/{hold}/usage", json=self._usage(p, c), headers=auth(GATEWAY))
        if h.state != "open":
            assert r.status_code == 409
        elif self._over_limits(h, p, c):
            assert r.status_code == 422, r.text
            assert r.json()["error"]["code"] == "model_limit_exceeded"
        elif h.seen is not None and (p < h.seen[0] or c < h.seen[1]):
            assert r.status_code == 422
            assert r.json()["error"]["code"] == "usage_invalid"
        else:
            assert r.status_code == 200, r.text
            h.seen = (p, c)

    @rule(hold=holds, with_usage=st.booleans(), dp=st.integers(0, 100), dc=st.integers(0, 100))
    def interrupt(self, hold: str, with_usage: bool, dp: int, dc: int) -> None:
        if hold == "none":
            return
        h = self.model_holds[hold]
        base = h.seen or (0, 0)
        body = self._usage(base[0] + dp, base[1] + dc) if with_usage else None
        r = self.client.post(f"/v1/holds/{hold}/interrupt", json=body, headers=auth(GATEWAY))
        if h.state in ("settled", "released"):
            assert r.status_code == 409
            return
        if with_usage and self._over_limits(h, base[0] + dp, base[1] + dc):
            assert r.status_code == 422, r.text
            return
        assert r.status_code == 200, r.text
        h.state = "interrupted"
        if with_usage:
            h.seen = (base[0] + dp, base[1] + dc)

    @rule(hold=holds, p=st.integers(0, 1500), c=st.integers(0, 1500))
    def settle(self, hold: str, p: int, c: int) -> None:
        if hold == "none":
            return
        h = self.model_holds[hold]
        acct = self.accounts[h.account]
        r = self.client.post(f"/v1/holds/{hold}/settle", json=self._usage(p, c), headers=auth(GATEWAY))
        if h.state in ("open", "interrupted") and self._over_limits(h, p, c):
            assert r.status_code == 422, r.text
            assert r.json()["error"]["code"] == "model_limit_exceeded"
        elif h.state in ("open", "interrupted"):
            assert r.status_code == 200, r.text
            x = charge(p, c)
            assert Decimal(r.json()["charge"]["amount"]) == x
            assert Decimal(r.json()["overage"]) == max(x - h.amount, Decimal(0))
            acct.held -= h.amount
            acct.balance -= x
            h.state, h.settled_with = "settled", (p, c)
        elif h.state == "settled":
            assert r.status_code == (200 if h.settled_with == (p, c) else 409), r.text
        else:
            assert r.status_code == 409

    @rule(hold=holds)
    def release(self, hold: str) -> None:
        if hold == "none":
            return
        h = self.model_holds[hold]
        r = self.client.post(f"/v1/holds/{hold}/release", headers=auth(GATEWAY))
        if h.state in ("open", "interrupted") and h.seen is not None:
            assert r.status_code == 409, r.text  # usage was seen: settle instead
        elif h.state in ("open", "interrupted"):
            assert r.status_code == 200, r.text
            self.accounts[h.account].held -= h.amount
            h.state = "released"
        elif h.state == "released":
            assert r.status_code == 200
        else:
            assert r.status_code == 409

    @invariant()
    def balances_match(self) -> None:
        for account_id, acct in self.accounts.items():
            body = self.client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
            assert Decimal(body["balance"]) == acct.balance, (account_id, body, acct)
            assert Decimal(body["held"]) == acct.held
            assert Decimal(body["available"]) == acct.balance - acct.held

    @invariant()
    def states_match(self) -> None:
        for hold_id, h in list(self.model_holds.items())[-4:]:
            body = self.client.get(f"/v1/holds/{hold_id}", headers=auth(GATEWAY)).json()
            assert body["state"] == h.state

    def teardown(self) -> None:
        for hold_id, h in self.model_holds.items():
            body = self.client.get(f"/v1/holds/{hold_id}", headers=auth(GATEWAY)).json()
            assert body["state"] == h.state
        if self.names:
            report = self.client.get("/admin/v1/integrity", headers=auth(VIEWER)).json()
            assert report["ok"] is True, report


@pytest.fixture
def machine(client: TestClient[Any]) -> type[HoldMachine]:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    HoldMachine.client = client
    HoldMachine.currency = currency
    return HoldMachine


def test_hold_lifecycle_matches_the_model(machine: type[HoldMachine]) -> None:
    test_case = machine.TestCase
    test_case.settings = settings(
        max_examples=30,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    test_case().runTest()
