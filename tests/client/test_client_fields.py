"""Every field of the ledger's answers reaches the client's models, against a real `ledger serve`.

Amounts by hand at the contract's example rates (see test_client_server): claude-sonnet-4-6
with max_input_tokens=1000 and max_output_tokens=1000 holds 1000 x 6 / 1e6 + 1000 x 15 / 1e6
= 0.021 (input rate 6: the highest input-side rate, the 1-hour cache write); 500 prompt +
200 completion tokens cost 500 x 3 / 1e6 + 200 x 15 / 1e6 = 0.0045.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from ledger_client import (
    Balance,
    BudgetExceeded,
    ChargeQuote,
    Hold,
    InsufficientFunds,
    LedgerClient,
    ModelRetired,
    Notice,
    Reservation,
    ReservationQuote,
)
from tests.client.conftest import Ledger, new_id

MODEL = "claude-sonnet-4-6"
LIMITS = {"max_input_tokens": 1000, "max_output_tokens": 1000}
FINAL = {"prompt_tokens": 500, "completion_tokens": 200}


def fields(model: type[object]) -> set[str]:
    return {f.name for f in dataclasses.fields(model)} - {"raw"}  # type: ignore[arg-type]


def client(ledger: Ledger) -> LedgerClient:
    return LedgerClient(ledger.url, ledger.token, timeout=10)


def test_hold_answers_fill_every_field(ledger: Ledger) -> None:
    account = ledger.account("1")
    with client(ledger) as c:
        hold = c.reserve(
            account,
            MODEL,
            price_version=ledger.version,
            budget_key="project-a",
            metadata={"r": "1"},
            **LIMITS,
        )
        # the reserve's answer has no field the model lacks (`notice`: absent without a retires_at)
        assert set(hold.raw) == fields(Hold) - {"notice"} and hold.notice is None
        assert hold.reservation == Reservation(
            1000, 1000, 1, Decimal(6), Decimal(15), "standard", Decimal("0.021")
        )
        assert (hold.budget_key, hold.metadata, hold.overage_flagged) == ("project-a", {"r": "1"}, False)
        assert hold.ttl_seconds > 0 and hold.updated_at >= hold.created_at
        assert (hold.resolved_reason, hold.resolved_at, hold.overage) == (None, None, None)
        settled = c.settle(hold.id, FINAL)
        assert set(settled.raw) == fields(Hold) - {"notice"}
        assert settled.resolved_at is not None and settled.overage == 0
        assert (settled.resolved_by, settled.resolved_reason) == ("gateway", None)

        other = c.reserve(account, MODEL, price_version=ledger.version, **LIMITS)
        ledger.admin(
            "POST", f"/admin/v1/holds/{other.id}/release", {"reason": "ticket 4711: duplicate request"}
        )
        released = c.get_hold(other.id)
    assert (released.state, released.resolved_by) == ("released", "admin")
    assert released.resolved_reason == "ticket 4711: duplicate request"
    assert released.released == Decimal("0.021") and released.charge is None


def test_balance_has_paid_and_granted(ledger: Ledger) -> None:
    account = ledger.account("1")
    expires = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    ledger.admin(
        "POST",
        f"/admin/v1/accounts/{account}/grants",
        {"amount": "0.25", "expires_at": expires, "reason": "promotion", "idempotency_key": new_id("grant")},
    )
    with client(ledger) as c:
        balance = c.balance(account)
    assert set(balance.raw) <= fields(Balance)
    assert (balance.paid, balance.granted, balance.balance) == (Decimal(1), Decimal("0.25"), Decimal("1.25"))
    assert (balance.held, balance.available, balance.credit_limit) == (0, Decimal("1.25"), 0)
    assert all(isinstance(getattr(balance, name), Decimal) for name in ("paid", "granted", "balance"))


def test_quotes_price_a_usage_and_size_a_reservation(ledger: Ledger) -> None:
    with client(ledger) as c:
        charged = c.quote(MODEL, usage=FINAL, price_version=ledger.version)
        sized = c.quote(MODEL, price_version=ledger.version, **LIMITS)
    assert isinstance(charged, ChargeQuote) and (charged.model, charged.price_version) == (
        MODEL,
        ledger.version,
    )
    assert charged.charge.amount == Decimal("0.0045") and charged.charge.tier == "standard"
    assert [(line.category, line.tokens, line.rate, line.amount) for line in charged.charge.lines] == [
        ("input", 500, Decimal(3), Decimal("0.0015")),
        ("output", 200, Decimal(15), Decimal("0.003")),
    ]
    assert isinstance(sized, ReservationQuote)
    assert sized.reservation == Reservation(
        1000, 1000, 1, Decimal(6), Decimal(15), "standard", Decimal("0.021")
    )


def test_a_budget_refusal_is_budget_exceeded_with_its_numbers(ledger: Ledger) -> None:
    account = ledger.account("1")
    ledger.admin(
        "PUT",
        f"/admin/v1/accounts/{account}/budgets/project-b",
        {"amount": "0.03", "period": "monthly", "reason": "cap"},
    )
    with client(ledger) as c:
        c.reserve(account, MODEL, price_version=ledger.version, budget_key="project-b", **LIMITS)
        with pytest.raises(BudgetExceeded) as caught:
            c.reserve(account, MODEL, price_version=ledger.version, budget_key="project-b", **LIMITS)
        assert c.balance(account).held == Decimal("0.021")  # the refused reserve held nothing
    error = caught.value
    assert isinstance(error, InsufficientFunds) and (error.status, error.code) == (402, "budget_exceeded")
    assert (error.budget_key, error.budget, error.spent, error.held) == (
        "project-b",
        Decimal("0.03"),
        Decimal(0),
        Decimal("0.021"),
    )
    assert (error.required, error.available) == (Decimal("0.021"), Decimal("0.009"))
    assert error.period_start is not None and error.period_end is not None


def test_a_retiring_model_s_notice_and_a_retired_model_s_refusal(ledger: Ledger) -> None:
    currency = "XRT"
    rates = {"input": "1", "output": "2"}
    limits = {"max_input_tokens": 1000, "max_output_tokens": 500, "rates": rates}
    ledger.admin(
        "POST",
        "/admin/v1/price-versions",
        {
            "currency": currency,
            "models": [
                {"model": "m-retiring", "retires_at": "2099-04-01T00:00:00Z", **limits},
                {"model": "m-retired", "retires_at": "2020-01-01T00:00:00+02:00", **limits},
            ],
        },
    )
    account = new_id()
    ledger.admin("POST", "/admin/v1/accounts", {"account_id": account, "currency": currency})
    ledger.admin(
        "POST", f"/admin/v1/accounts/{account}/deposits", {"idempotency_key": new_id("d"), "amount": "1"}
    )
    when = datetime(2099, 4, 1, tzinfo=UTC)
    with client(ledger) as c:
        hold = c.reserve(account, "m-retiring", max_output_tokens=10)
        assert set(hold.raw) == fields(Hold)
        assert hold.notice is not None and (hold.notice.code, hold.notice.retires_at) == (
            "model_retiring",
            when,
        )
        assert "m-retiring retires at 2099-04-01T00:00:00Z" in hold.notice.message
        assert c.get_hold(hold.id).notice == hold.notice
        quote = c.quote("m-retiring", currency=currency, max_output_tokens=10)
        assert isinstance(quote, ReservationQuote) and quote.notice == hold.notice
        assert quote.reservation.amount == Decimal("0.00102")  # 1000 x 1 / 1e6 + 10 x 2 / 1e6
        priced = c.quote("m-retiring", currency=currency, usage=FINAL)
        assert isinstance(priced, ChargeQuote) and priced.notice == hold.notice
        with pytest.raises(ModelRetired) as refused:
            c.reserve(account, "m-retired", max_output_tokens=10)
        with pytest.raises(ModelRetired) as quoted:
            c.quote("m-retired", currency=currency, usage=FINAL)
    assert (refused.value.status, refused.value.code, refused.value.param) == (410, "model_retired", "model")
    assert refused.value.retires_at == datetime(2019, 12, 31, 22, tzinfo=UTC) == quoted.value.retires_at
    assert isinstance(Notice.from_wire(hold.raw["notice"]), Notice)
