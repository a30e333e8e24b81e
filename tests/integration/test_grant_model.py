"""Random grants, settles and expiry passes on one account, against a plain Python model.

The model consumes a charge from the live grants (priority, then earliest expiry,
then id), each up to what it has left, then from paid; an expiry pass empties every
expired grant. After every step each grant's remaining equals the model's and is
never below zero, paid and granted equal the model's (granted counts only grants not
yet past their expires_at, whether or not an expiry pass has run; balance still holds an
expired grant's remainder until a pass posts it out), available is paid + granted, and
at the end the whole-ledger integrity check is ok.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from tests.api.test_grants_api import expire_now, grants_of, reserve_settle
from tests.conftest import (
    FINANCE,
    GATEWAY,
    assert_integrity,
    auth,
    fresh_currency,
    new_id,
    publish,
    simple_document,
)
from tests.integration.test_grant_invariants import sql_grant

UNIT = Decimal("0.0001")
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("grant"),
            st.integers(min_value=1, max_value=40),  # x 0.0001
            st.sampled_from([0, 0, 50, 100]),
            st.integers(min_value=1, max_value=3),  # expires in hours; 0: already expired (by SQL)
        ),
        st.tuples(st.just("expired_grant"), st.integers(min_value=1, max_value=40), st.just(0), st.just(0)),
        st.tuples(
            st.just("settle"),
            st.integers(min_value=0, max_value=1000),
            st.integers(min_value=0, max_value=500),
            st.just(0),
        ),
        st.tuples(st.just("expire"), st.just(0), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


def charge_of(p: int, c: int) -> Decimal:
    return Decimal(p) * Decimal("0.000002") + Decimal(c) * Decimal("0.00001")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_grants_never_go_below_zero_and_the_books_stay_whole(
    client: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any], sa_url: str, ops: list[Any]
) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account_id = make_account("1", currency=currency)
    paid = Decimal(1)
    left: dict[str, Decimal] = {}  # grant id -> the model's remaining
    for kind, a, b, hours in ops:
        if kind == "grant":
            expires = (datetime.now(UTC) + timedelta(hours=hours)).isoformat()
            r = client.post(
                f"/admin/v1/accounts/{account_id}/grants",
                json={
                    "idempotency_key": new_id("g"),
                    "amount": f"{a * UNIT:f}",
                    "priority": b,
                    "expires_at": expires,
                    "reason": "model",
                },
                headers=auth(FINANCE),
            )
            assert r.status_code == 201, r.text
            left[r.json()["grant_id"]] = a * UNIT
        elif kind == "expired_grant":
            left[
                sql_grant(
                    sql, account_id, f"{a * UNIT:f}", expires="now() - interval '1 second'", currency=currency
                )
            ] = a * UNIT
        elif kind == "settle":
            rows = grants_of(client, account_id)
            now = datetime.now(UTC)
            order = sorted(
                (g for g in rows.values() if datetime.fromisoformat(g["expires_at"]) > now),
                key=lambda g: (g["priority"], g["expires_at"], g["grant_id"]),
            )
            need = charge_of(a, b)
            for g in order:
                take = min(left[g["grant_id"]], need)
                left[g["grant_id"]] -= take
                need -= take
            paid -= need
            reserve_settle(client, account_id, a, b, out=500)
        else:
            expire_now(sa_url)
            now = datetime.now(UTC)
            for gid, g in grants_of(client, account_id).items():
                if datetime.fromisoformat(g["expires_at"]) <= now:
                    left[gid] = Decimal(0)
        rows = grants_of(client, account_id)
        assert {gid: Decimal(g["remaining"]) for gid, g in rows.items()} == left
        assert all(Decimal(g["remaining"]) >= 0 for g in rows.values())
        body = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
        now = datetime.now(UTC)
        live = sum(
            (left[gid] for gid, g in rows.items() if datetime.fromisoformat(g["expires_at"]) > now),
            Decimal(0),
        )
        assert Decimal(body["paid"]) == paid
        assert Decimal(body["granted"]) == live
        assert Decimal(body["available"]) == paid + live
        assert Decimal(body["balance"]) == paid + sum(left.values(), Decimal(0))
    assert_integrity(client)
