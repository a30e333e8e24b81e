"""Money safety on the hold path: implausible usage, the overage policy, release after
usage was seen, a stale cached active version, and unknown models.

Prices as in test_holds_api: input 2, output 10 per 1M, max input 1000, max output 500,
so a hold with max_output_tokens O holds 0.002 + O x 0.00001.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import structlog
from litestar.testing import TestClient

from tests.conftest import (
    FINANCE,
    GATEWAY,
    VIEWER,
    assert_integrity,
    auth,
    balance,
    call,
    fresh_currency,
    publish,
    reserve,
    usage,
)


def hold(client: TestClient[Any], hold_id: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"/v1/holds/{hold_id}", headers=auth(GATEWAY)).json()
    return body


def account(client: TestClient[Any], account_id: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"/admin/v1/accounts/{account_id}", headers=auth(VIEWER)).json()
    return body


def two_models(currency: str, *models: str) -> dict[str, Any]:
    return {
        "currency": currency,
        "source": "test sheet",
        "models": [
            {
                "model": m,
                "max_input_tokens": 1000,
                "max_output_tokens": 500,
                "rates": {"input": "2", "output": "10"},
            }
            for m in models
        ],
    }


# --- 1. implausible usage is refused --------------------------------------------------------


def test_settle_above_the_model_limits_is_refused_and_changes_nothing(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    h = reserve(client, account_id, max_output_tokens=100, n=2).json()
    before = balance(client, account_id)
    r = call(client, h["id"], "settle", usage(1_000_000_000_000, 1))
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "model_limit_exceeded"
    assert err["param"] == "usage.prompt_tokens"
    assert "1000000000000" in err["message"] and "1000" in err["message"]
    assert balance(client, account_id) == before
    assert hold(client, h["id"])["state"] == "open"
    # completion: the model's max output (500) x n (2) = 1000
    r = call(client, h["id"], "settle", usage(10, 1001))
    assert r.status_code == 422
    assert r.json()["error"]["param"] == "usage.completion_tokens"
    assert balance(client, account_id) == before
    ok = call(client, h["id"], "settle", usage(1000, 1000))  # exactly at the limits
    assert ok.status_code == 200, ok.text
    assert ok.json()["charge"]["amount"] == "0.012"
    assert_integrity(client)


def test_checkpoint_interrupt_admin_and_late_settles_check_the_limits(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    account_id = world["account"]
    h = reserve(client, account_id, max_output_tokens=100).json()
    r = call(client, h["id"], "usage", usage(1001, 1))
    assert r.status_code == 422
    assert r.json()["error"] == {
        "type": "invalid_request",
        "code": "model_limit_exceeded",
        "message": r.json()["error"]["message"],
        "param": "usage.prompt_tokens",
    }
    r = call(client, h["id"], "interrupt", usage(1, 501))
    assert r.status_code == 422
    assert r.json()["error"]["param"] == "usage.completion_tokens"
    got = hold(client, h["id"])
    assert got["state"] == "open" and got["usage"] is None  # nothing recorded
    r = client.post(
        f"/admin/v1/holds/{h['id']}/settle",
        json={"reason": "from logs", **usage(5000, 1)},
        headers=auth(FINANCE),
    )
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "model_limit_exceeded"
    # released by an admin, then a late gateway settle (a true-up) with implausible usage
    released = client.post(
        f"/admin/v1/holds/{h['id']}/release", json={"reason": "dispute"}, headers=auth(FINANCE)
    )
    assert released.status_code == 200
    before = balance(client, account_id)
    late = call(client, h["id"], "settle", usage(10**12, 1))
    assert late.status_code == 422
    assert late.json()["error"]["code"] == "model_limit_exceeded"
    assert balance(client, account_id) == before
    assert hold(client, h["id"])["state"] == "released"


def test_a_limit_refusal_does_not_mask_a_final_hold(client: TestClient[Any], world: dict[str, Any]) -> None:
    """Refusing implausible usage never hides what the hold's state says: a settled hold is 409."""
    h = reserve(client, world["account"], max_output_tokens=100).json()
    assert call(client, h["id"], "settle", usage(10, 10)).status_code == 200
    assert call(client, h["id"], "settle", usage(10**12, 1)).status_code == 409


# --- 1. the overage policy ----------------------------------------------------------------------


def test_a_settle_above_the_overage_factor_is_recorded_flagged_and_marks_the_account(
    client: TestClient[Any], make_account: Any, world: dict[str, Any]
) -> None:
    from ledger.metrics import OVERAGE_FLAGGED

    currency = world["currency"]
    account_id = make_account("1", currency=currency)
    quiet = make_account("1", currency=currency)
    counted = OVERAGE_FLAGGED.labels(currency)._value.get()

    # 2 x 0.003 = 0.006 is the most a settle may charge unflagged (default factor 2)
    at_factor = reserve(client, account_id, max_output_tokens=100).json()
    r = call(client, at_factor["id"], "settle", usage(1000, 400))  # 0.002 + 0.004
    assert r.json()["charge"]["amount"] == "0.006"
    assert r.json()["overage_flagged"] is False
    assert account(client, account_id)["review"] is None

    h = reserve(client, account_id, max_output_tokens=100).json()
    assert h["overage_flagged"] is False
    with structlog.testing.capture_logs() as logs:
        r = call(client, h["id"], "settle", usage(1000, 500))  # 0.007 > 0.006
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "settled"
    assert body["charge"]["amount"] == "0.007"
    assert body["overage"] == "0.004"
    assert body["overage_flagged"] is True
    assert hold(client, h["id"])["overage_flagged"] is True
    assert balance(client, account_id)["balance"] == "0.987"  # 1 - 0.006 - 0.007: the charge stands
    review = account(client, account_id)["review"]
    assert review["hold_id"] == h["id"]
    assert "0.007" in review["reason"] and "0.003" in review["reason"]
    assert review["at"].endswith("Z")
    warnings = [e for e in logs if e["event"] == "hold.overage_flagged"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert warnings[0]["hold_id"] == h["id"] and warnings[0]["charged"] == "0.007"
    assert OVERAGE_FLAGGED.labels(currency)._value.get() == counted + 1
    metrics = client.get("/metrics").text
    assert f'ledger_overage_flagged_total{{currency="{currency}"}}' in metrics

    marked = client.get("/admin/v1/accounts", params={"review": "true", "limit": 500}, headers=auth(VIEWER))
    assert marked.status_code == 200
    ids = [a["account_id"] for a in marked.json()["data"]]
    assert account_id in ids and quiet not in ids
    assert all(a["review"] is not None for a in marked.json()["data"])
    unmarked = client.get(
        "/admin/v1/accounts", params={"review": "false", "limit": 500}, headers=auth(VIEWER)
    )
    assert quiet in [a["account_id"] for a in unmarked.json()["data"]]
    assert_integrity(client)


def test_admin_settles_and_true_ups_are_flagged_too(
    client: TestClient[Any], make_account: Any, world: dict[str, Any]
) -> None:
    account_id = make_account("1", currency=world["currency"])
    a = reserve(client, account_id, max_output_tokens=10).json()  # 0.0021
    r = client.post(
        f"/admin/v1/holds/{a['id']}/settle",
        json={"reason": "logs", **usage(1000, 300)},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200, r.text
    assert r.json()["overage_flagged"] is True  # 0.005 > 0.0042
    assert account(client, account_id)["review"]["hold_id"] == a["id"]

    b = reserve(client, account_id, max_output_tokens=10).json()
    client.post(f"/admin/v1/holds/{b['id']}/release", json={"reason": "dispute"}, headers=auth(FINANCE))
    late = call(client, b["id"], "settle", usage(1000, 500))  # true-up to 0.007
    assert late.status_code == 200, late.text
    assert late.json()["true_up"] == "0.007"
    assert late.json()["overage_flagged"] is True
    assert account(client, account_id)["review"]["hold_id"] == b["id"]
    assert_integrity(client)


def test_the_database_guards_the_flag(client: TestClient[Any], world: dict[str, Any], sql: Any) -> None:
    """Direct SQL cannot flag a hold that is not being settled, nor clear a flag."""
    open_hold = reserve(client, world["account"], max_output_tokens=100).json()
    flagged = reserve(client, world["account"], max_output_tokens=100).json()
    assert call(client, flagged["id"], "settle", usage(1000, 500)).json()["overage_flagged"] is True
    for statement, hold_id in (
        ("UPDATE holds SET overage_flagged = true WHERE id = %s", open_hold["id"]),
        ("UPDATE holds SET overage_flagged = false WHERE id = %s", flagged["id"]),
    ):
        with pytest.raises(psycopg.errors.DatabaseError):
            sql.execute(statement, (hold_id,))
        sql.rollback()
    with pytest.raises(psycopg.errors.DatabaseError):
        sql.execute("UPDATE accounts SET review = '{\"note\": 1}' WHERE id = %s", (world["account"],))
    sql.rollback()


# --- 4. release after usage was seen ------------------------------------------------------------


def test_release_after_usage_was_seen_is_refused(client: TestClient[Any], world: dict[str, Any]) -> None:
    account_id = world["account"]
    h = reserve(client, account_id, max_output_tokens=100).json()
    assert call(client, h["id"], "usage", usage(100, 10)).status_code == 200
    before = balance(client, account_id)
    r = call(client, h["id"], "release")
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "hold_state_conflict"
    assert "usage was already seen" in err["message"] and "settle" in err["message"]
    r = client.post(f"/admin/v1/holds/{h['id']}/release", json={"reason": "forgive"}, headers=auth(FINANCE))
    assert r.status_code == 409
    assert "/admin/v1/holds/{id}/settle" in r.json()["error"]["message"]
    assert balance(client, account_id) == before
    assert hold(client, h["id"])["state"] == "open"
    # an interrupt's usage counts the same
    i = reserve(client, account_id, max_output_tokens=100).json()
    call(client, i["id"], "interrupt", usage(50, 5))
    assert call(client, i["id"], "release").status_code == 409
    # the way out: settle at the largest usage seen
    r = client.post(f"/admin/v1/holds/{h['id']}/settle", json={"reason": "lost"}, headers=auth(FINANCE))
    assert r.status_code == 200
    assert r.json()["charge"]["amount"] == "0.0003"
    # no usage seen: release works, and releasing twice stays 200
    n = reserve(client, account_id).json()
    call(client, n["id"], "interrupt")
    first = call(client, n["id"], "release")
    assert first.status_code == 200
    assert call(client, n["id"], "release").json() == first.json()
    assert_integrity(client)


# --- 2. the cached active price version heals ---------------------------------------------------


def test_a_model_missing_from_the_cached_active_version_rereads_it(
    client: TestClient[Any], make_account: Any
) -> None:
    currency = fresh_currency()
    publish(client, two_models(currency, "t-a", "t-b"))
    account_id = make_account("1", currency=currency)
    assert reserve(client, account_id, "t-a").status_code == 201  # caches the active version
    publish(client, two_models(currency, "t-a"), replace=True)  # t-b withdrawn
    r = reserve(client, account_id, "t-b")
    assert r.status_code == 503  # known (priced before), no valid price now
    assert r.json()["error"]["code"] == "pricing_unavailable"
    back = publish(client, two_models(currency, "t-a", "t-b"))  # a refresh brings it back
    r = reserve(client, account_id, "t-b")  # the cache still says the version without t-b
    assert r.status_code == 201, r.text
    assert r.json()["price_version"] == back


# --- 12. unknown models --------------------------------------------------------------------------


def test_an_unknown_model_is_404_and_logs_no_traceback(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    with structlog.testing.capture_logs() as logs:
        r = reserve(client, world["account"], "no-such-model")
        quotes = [
            client.post(path, json=body, headers=auth(token))
            for path, token in (("/v1/quotes", GATEWAY), ("/admin/v1/quotes", VIEWER))
            for body in (
                {"model": "no-such-model", "currency": world["currency"], "max_output_tokens": 1},
                {"model": "no-such-model", "price_version": world["version"], "currency": world["currency"]},
            )
        ]
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "type": "not_found",
            "code": "model_not_found",
            "message": r.json()["error"]["message"],
            "param": "model",
        }
    }
    assert "no-such-model" in r.json()["error"]["message"]
    for q in quotes:
        assert q.status_code == 404, q.text
        assert q.json()["error"]["code"] == "model_not_found"
    assert not [e for e in logs if e.get("log_level") == "error" or "exc_info" in e]
    assert balance(client, world["account"]) == {"balance": "1", "held": "0", "available": "1"}


def test_a_known_model_without_a_price_stays_503(client: TestClient[Any], make_account: Any) -> None:
    currency = fresh_currency()
    old = publish(client, two_models(currency, "t-a", "t-gone"))
    publish(client, two_models(currency, "t-a"), replace=True)
    account_id = make_account("1", currency=currency)
    for model in ("t-gone", "gemini-3.5-flash"):
        r = reserve(client, account_id, model)
        assert r.status_code == 503, (model, r.text)
        assert r.json()["error"]["code"] == "pricing_unavailable"
        q = client.post(
            "/v1/quotes",
            json={"model": model, "currency": currency, "max_output_tokens": 1},
            headers=auth(GATEWAY),
        )
        assert q.status_code == 503
    # a model priced only in another currency is not known in this one
    assert reserve(client, account_id, "t-simple").status_code == 404
    # pinned to the version that priced it, the withdrawn model still reserves
    assert reserve(client, account_id, "t-gone", price_version=old).status_code == 201


def test_a_usage_quote_applies_the_settle_limits(client: TestClient[Any], world: dict[str, Any]) -> None:
    """A quote answers what a settle would: usage a settle refuses is refused here too."""
    limits = client.get(f"/admin/v1/price-versions/{world['version']}", headers=auth(VIEWER)).json()
    model = limits["document"]["models"][0]
    max_in, max_out = model["max_input_tokens"], model["max_output_tokens"]
    body = {"model": "t-simple", "currency": world["currency"], "price_version": world["version"]}
    for path, token in (("/v1/quotes", GATEWAY), ("/admin/v1/quotes", VIEWER)):
        ok = client.post(path, json={**body, **usage(max_in, max_out)}, headers=auth(token))
        assert ok.status_code == 200, ok.text
        r = client.post(path, json={**body, **usage(max_in + 1, 0)}, headers=auth(token))
        assert r.status_code == 422 and r.json()["error"]["code"] == "model_limit_exceeded", r.text
        assert r.json()["error"]["param"] == "usage.prompt_tokens"
        r = client.post(path, json={**body, **usage(0, 2 * max_out)}, headers=auth(token))
        assert r.status_code == 422 and r.json()["error"]["param"] == "usage.completion_tokens", r.text
        # n completions: as at settle, the output limit is n x the model's
        r = client.post(path, json={**body, **usage(0, 2 * max_out), "n": 2}, headers=auth(token))
        assert r.status_code == 200, r.text


def test_hold_metadata_is_bounded_like_account_metadata(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    before = balance(client, world["account"])
    r = reserve(client, world["account"], metadata={"blob": "x" * 20_000})
    assert r.status_code == 422 and r.json()["error"]["param"] == "metadata", r.text
    assert balance(client, world["account"]) == before
    assert reserve(client, world["account"], metadata={"blob": "x" * 1_000}).status_code == 201
