"""Amounts and timestamps at the edge of what the ledger can store: 422, never a database error.

Balances are NUMERIC(38, 12): |balance| < 10^26. An amount that fits alone but would
take the resulting balance out of range is refused with `param` "amount", and the
balance is unchanged. Arithmetic on 38-digit balances is exact (never the default
28-digit Decimal context).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from litestar.testing import TestClient

from pricing.money import AmountError, check_storable
from tests.conftest import FINANCE, VIEWER, assert_integrity, auth, new_id

MAX = "99999999999999999999999999.999999999999"  # the largest NUMERIC(38, 12)
BIG = "99999999999999999999999999"


def move(client: TestClient[Any], account: str, kind: str, amount: str) -> Any:
    body: dict[str, Any] = {"idempotency_key": new_id("b"), "amount": amount}
    if kind == "adjustments":
        body["reason"] = "bounds test"
    return client.post(f"/admin/v1/accounts/{account}/{kind}", json=body, headers=auth(FINANCE))


def account_numbers(client: TestClient[Any], account: str) -> tuple[Any, ...]:
    a = client.get(f"/admin/v1/accounts/{account}", headers=auth(VIEWER)).json()
    journal = client.get(f"/admin/v1/accounts/{account}/transactions", headers=auth(VIEWER)).json()["data"]
    return a["balance"], a["held"], a["available"], len(journal)


@pytest.mark.parametrize(
    ("kind", "first", "second"),
    [
        ("deposits", BIG, BIG),
        ("deposits", MAX, "0.000000000001"),
        ("adjustments", BIG, "1"),
        ("adjustments", "-" + BIG, "-1"),
        ("adjustments", "-" + MAX, "-" + MAX),
    ],
)
def test_a_movement_that_would_overflow_the_balance_is_422(
    client: TestClient[Any], make_account: Any, kind: str, first: str, second: str
) -> None:
    account = make_account()
    r = move(client, account, kind, first)
    assert r.status_code == 201, r.text
    before = account_numbers(client, account)
    r = move(client, account, kind, second)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("validation_error", "amount")
    assert "beyond the ledger's range" in error["message"]
    assert account_numbers(client, account) == before
    assert_integrity(client)


def test_an_amount_too_large_alone_is_422(client: TestClient[Any], make_account: Any) -> None:
    account = make_account()
    for kind in ("deposits", "adjustments"):
        r = move(client, account, kind, "1" + "0" * 26)
        assert (r.status_code, r.json()["error"]["param"]) == (422, "amount"), r.text
    r = client.post(
        "/admin/v1/accounts",
        json={"account_id": new_id(), "credit_limit": "1" + "0" * 26},
        headers=auth(FINANCE),
    )
    assert (r.status_code, r.json()["error"]["param"]) == (422, "credit_limit")


def test_38_digit_balances_are_reported_exactly(client: TestClient[Any], make_account: Any) -> None:
    account = make_account(credit_limit="0.000000000001")
    assert move(client, account, "deposits", "99999999999999999999999999.999999999998").status_code == 201
    a = client.get(f"/admin/v1/accounts/{account}", headers=auth(VIEWER)).json()
    assert a["balance"] == "99999999999999999999999999.999999999998"
    assert a["available"] == MAX  # default Decimal context would round this to 1E+26
    b = client.get(
        f"/admin/v1/accounts/{account}/balance",
        params={"as_of": "2999-01-01T00:00:00Z"},
        headers=auth(VIEWER),
    ).json()
    assert (b["balance"], b["available"]) == ("99999999999999999999999999.999999999998", MAX)
    r = move(client, account, "deposits", "0.000000000001")
    assert r.status_code == 201, r.text
    assert r.json()["balance"] == MAX
    assert move(client, account, "deposits", "0.000000000001").status_code == 422


@pytest.mark.parametrize(
    "as_of",
    [
        "9999-12-31T23:59:59-10:00",
        "0001-01-01T00:00:00+10:00",
        "0001-01-01T05:00:00+05:01",
    ],
)
def test_as_of_outside_the_representable_range_is_422(
    client: TestClient[Any], make_account: Any, as_of: str
) -> None:
    account = make_account("1")
    r = client.get(f"/admin/v1/accounts/{account}/balance", params={"as_of": as_of}, headers=auth(VIEWER))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == "as_of"


def test_as_of_at_the_edges_of_the_range_answers(client: TestClient[Any], make_account: Any) -> None:
    account = make_account("1")
    url = f"/admin/v1/accounts/{account}/balance"
    early = client.get(url, params={"as_of": "0001-01-01T00:00:00Z"}, headers=auth(VIEWER))
    assert (early.status_code, early.json()["balance"]) == (200, "0")
    late = client.get(url, params={"as_of": "9999-12-31T23:59:59Z"}, headers=auth(VIEWER))
    assert (late.status_code, late.json()["balance"]) == (200, "1")


def test_check_storable() -> None:
    assert check_storable(Decimal(MAX)) == Decimal(MAX)
    assert check_storable(Decimal("-" + MAX)) == Decimal("-" + MAX)
    with pytest.raises(AmountError):
        check_storable(Decimal(10) ** 26)
    with pytest.raises(AmountError):
        check_storable(-(Decimal(10) ** 26))
