"""Direct SQL cannot make a hold disagree with the journal (migration 0006)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import GATEWAY, auth, fresh_currency, new_id, publish, simple_document


@pytest.fixture
def holds(client: TestClient[Any], make_account: Any) -> dict[str, Any]:
    currency = fresh_currency()
    version = publish(client, simple_document(currency))
    account_id = make_account("1", currency=currency)

    def reserve() -> str:
        r = client.post(
            "/v1/holds",
            json={
                "account_id": account_id,
                "idempotency_key": new_id("k"),
                "model": "t-simple",
                "max_output_tokens": 100,
            },
            headers=auth(GATEWAY),
        )
        assert r.status_code == 201
        hold_id: str = r.json()["id"]
        return hold_id

    settled = reserve()
    r = client.post(
        f"/v1/holds/{settled}/settle",
        json={"usage": {"prompt_tokens": 10, "completion_tokens": 1}},
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200
    return {
        "account": account_id,
        "currency": currency,
        "version": version,
        "open": reserve(),
        "settled": settled,
    }


def refused(sql: psycopg.Connection[Any], statement: str, params: tuple[Any, ...]) -> str:
    """Run one statement and commit; return the refusal (immediate or at commit)."""
    with pytest.raises(psycopg.Error) as caught:
        sql.execute(statement, params)
        sql.commit()
    sql.rollback()
    return str(caught.value)


def test_a_hold_without_its_reserve_posting_is_refused(
    holds: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    message = refused(
        sql,
        "INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, "
        "currency, amount, reservation, ttl_seconds, expires_at) "
        "VALUES (gen_random_uuid(), %s, 'sneaky', 'x', 'open', "
        "'t-simple', %s, %s, 5, '{}'::jsonb, 60, now() + interval '1 minute')",
        (holds["account"], holds["version"], holds["currency"]),
    )
    assert "reserves 5.000000000000 but its reserve transaction holds 0" in message


def test_settling_or_releasing_without_postings_is_refused(
    holds: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    message = refused(
        sql,
        "UPDATE holds SET state = 'settled', charge = '{\"amount\": \"999\"}'::jsonb, charged = 999, "
        "released = 0, overage = 999 - amount, resolved_by = 'gateway', resolved_at = now() WHERE id = %s",
        (holds["open"],),
    )
    assert "without a matching journal transaction" in message
    message = refused(
        sql,
        "UPDATE holds SET state = 'released', released = amount, resolved_by = 'admin', resolved_at = now() "
        "WHERE id = %s",
        (holds["open"],),
    )
    assert "without a matching journal transaction" in message


def test_money_fields_cannot_be_rewritten(holds: dict[str, Any], sql: psycopg.Connection[Any]) -> None:
    assert "charge.amount differs" in refused(
        sql, "UPDATE holds SET charged = 1 WHERE id = %s", (holds["settled"],)
    )
    assert "without a true-up" in refused(
        sql,
        "UPDATE holds SET charged = 1, charge = jsonb_set(charge, '{amount}', '\"1\"'), overage = 1 - amount "
        "WHERE id = %s",
        (holds["settled"],),
    )
    assert "never changes" in refused(sql, "UPDATE holds SET released = 0 WHERE id = %s", (holds["settled"],))
    assert "no charge, release" in refused(
        sql, "UPDATE holds SET charged = 1 WHERE id = %s", (holds["open"],)
    )
    assert "charge changes only with a true-up" in refused(
        sql,
        'UPDATE holds SET charge = \'{"amount": "0.00003", "lines": []}\'::jsonb WHERE id = %s',
        (holds["settled"],),
    )


@pytest.mark.parametrize(
    ("columns", "values", "why"),
    [
        ("state", "'settled'", "a hold starts open"),
        ("state", "'interrupted'", "a hold starts open"),
        ("charged", "0", "no charge, release"),
        ("released", "5", "no charge, release"),
        ("true_up", "1", "no charge, release"),
        ("charge", "'{}'::jsonb", "no charge, release"),
        ("overage_flagged", "true", "a new hold is not flagged"),
    ],
)
def test_a_new_hold_starts_open_unflagged_and_without_money_columns(
    holds: dict[str, Any], sql: psycopg.Connection[Any], columns: str, values: str, why: str
) -> None:
    """Migration 0018 calls these guards on INSERT only when their condition holds: each
    refusal is still made (and before the deferred journal check)."""
    state = values if columns == "state" else "'open'"
    extra_columns, extra_values = ("", "") if columns == "state" else (f", {columns}", f", {values}")
    message = refused(
        sql,
        "INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, "
        f"currency, amount, reservation, ttl_seconds, expires_at{extra_columns}) "
        f"VALUES (gen_random_uuid(), %s, %s, 'x', {state}, "
        f"'t-simple', %s, %s, 5, '{{}}'::jsonb, 60, now() + interval '1 minute'{extra_values})",
        (holds["account"], new_id("k"), holds["version"], holds["currency"]),
    )
    assert why in message


def test_the_overage_flag_is_set_only_by_a_settle_and_never_cleared(
    holds: dict[str, Any], sql: psycopg.Connection[Any]
) -> None:
    assert "flagged only by the settle or true-up" in refused(
        sql, "UPDATE holds SET overage_flagged = true WHERE id = %s", (holds["open"],)
    )
    assert "flagged only by the settle or true-up" in refused(
        sql, "UPDATE holds SET overage_flagged = true WHERE id = %s", (holds["settled"],)
    )
