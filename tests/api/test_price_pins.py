"""Pins that make sense: a request may pin a price version in effect now, or one superseded
within `LEDGER_PRICE_PIN_GRACE_SECONDS`; never one whose effective_at is still ahead.

Refusals are 422 with their own codes and hold nothing. Finance's quotes
(`/admin/v1/quotes`) may price any published version, a future one included (a preview).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from tests.conftest import (
    GATEWAY,
    VIEWER,
    auth,
    balance,
    fresh_currency,
    new_id,
    publish,
    reserve,
    simple_document,
)


@pytest.fixture
def strict(settings: Any, sa_url: str) -> Iterator[TestClient[Any]]:
    """The service with no grace: a superseded version may not be pinned at all."""
    from ledger.app import create_app

    app = create_app(dataclasses.replace(settings, price_pin_grace_seconds=0), sa_url)
    with TestClient(app) as client:
        yield client


def holds_of(sql: psycopg.Connection[Any], account_id: str) -> int:
    return int(sql.execute("SELECT count(*) FROM holds WHERE account_id = %s", (account_id,)).fetchone()[0])


def refused(r: Any, code: str) -> None:
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == (code, "price_version"), error


def test_a_version_not_yet_in_effect_cannot_be_pinned(
    client: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    """The finding: a version effective in 2030 with every rate 0 could be pinned (charge 0)."""
    currency = fresh_currency()
    publish(client, simple_document(currency))
    free = publish(
        client,
        simple_document(currency, input_rate="0", output_rate="0", effective_at="2030-01-01T00:00:00Z"),
    )
    account_id = make_account("1", currency=currency)
    before = balance(client, account_id)
    r = reserve(client, account_id, max_output_tokens=100, price_version=free)
    refused(r, "price_version_not_effective")
    assert "2030-01-01" in r.json()["error"]["message"]
    assert holds_of(sql, account_id) == 0
    assert balance(client, account_id) == before
    # The gateway's quote obeys the same rule; finance may preview the future version.
    body = {"currency": currency, "model": "t-simple", "max_output_tokens": 100, "price_version": free}
    refused(client.post("/v1/quotes", json=body, headers=auth(GATEWAY)), "price_version_not_effective")
    preview = client.post("/admin/v1/quotes", json=body, headers=auth(VIEWER))
    assert preview.status_code == 200, preview.text
    assert preview.json()["reservation"]["amount"] == "0"


def test_a_superseded_version_can_be_pinned_within_the_grace_and_settles_at_it(
    client: TestClient[Any], make_account: Any
) -> None:
    currency = fresh_currency()
    old = publish(client, simple_document(currency, input_rate="1", output_rate="5"))
    publish(client, simple_document(currency))  # supersedes it now
    account_id = make_account("1", currency=currency)
    r = reserve(client, account_id, max_output_tokens=100, price_version=old)
    assert r.status_code == 201, r.text
    assert (r.json()["price_version"], r.json()["amount"]) == (old, "0.0015")  # 1000 x 1 + 100 x 5 per 1M
    quote = {"currency": currency, "model": "t-simple", "price_version": old, "max_output_tokens": 100}
    assert client.post("/v1/quotes", json=quote, headers=auth(GATEWAY)).status_code == 200
    settle = client.post(
        f"/v1/holds/{r.json()['id']}/settle",
        json={"usage": {"prompt_tokens": 1000, "completion_tokens": 100}},
        headers=auth(GATEWAY),
    )
    assert settle.status_code == 200, settle.text
    assert settle.json()["charge"]["amount"] == "0.0015"


def test_a_version_superseded_longer_ago_than_the_grace_cannot_be_pinned(
    strict: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    currency = fresh_currency()
    old = publish(strict, simple_document(currency, input_rate="1", output_rate="5"))
    account_id = make_account("1", currency=currency)
    assert reserve(strict, account_id, max_output_tokens=100, price_version=old).status_code == 201
    active = publish(strict, simple_document(currency))
    before = balance(strict, account_id)
    r = reserve(strict, account_id, max_output_tokens=100, price_version=old)
    refused(r, "price_version_superseded")
    assert holds_of(sql, account_id) == 1
    assert balance(strict, account_id) == before
    quote = {"currency": currency, "model": "t-simple", "price_version": old, "max_output_tokens": 100}
    refused(strict.post("/v1/quotes", json=quote, headers=auth(GATEWAY)), "price_version_superseded")
    # The active version, pinned or not, is fine.
    assert reserve(strict, account_id, max_output_tokens=100, price_version=active).status_code == 201
    assert reserve(strict, account_id, max_output_tokens=100).json()["price_version"] == active


def test_a_retry_of_an_accepted_pinned_reserve_is_answered_its_hold_after_the_pin_lapsed(
    strict: TestClient[Any], make_account: Any
) -> None:
    currency = fresh_currency()
    old = publish(strict, simple_document(currency))
    account_id = make_account("1", currency=currency)
    key = new_id("r")
    first = reserve(strict, account_id, key=key, max_output_tokens=100, price_version=old)
    assert first.status_code == 201, first.text
    publish(strict, simple_document(currency, input_rate="3"))
    again = reserve(strict, account_id, key=key, max_output_tokens=100, price_version=old)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]


def test_an_unknown_pinned_version_is_404(client: TestClient[Any], world: dict[str, Any]) -> None:
    r = reserve(client, world["account"], max_output_tokens=100, price_version="v999999999")
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "price_version_not_found"


def test_a_backdated_version_that_was_never_in_effect_cannot_be_pinned(
    client: TestClient[Any], make_account: Any, sql: psycopg.Connection[Any]
) -> None:
    """Found in review: a version published with an effective_at before the active one's
    (so it never applied) could be pinned within the grace, at rates 0."""
    from datetime import UTC, datetime, timedelta

    currency = fresh_currency()
    publish(client, simple_document(currency))
    earlier = (datetime.now(UTC) - timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    free = publish(client, simple_document(currency, input_rate="0", output_rate="0", effective_at=earlier))
    account_id = make_account("1", currency=currency)
    r = reserve(client, account_id, max_output_tokens=100, price_version=free)
    refused(r, "price_version_superseded")
    assert "never in effect" in r.json()["error"]["message"]
    assert holds_of(sql, account_id) == 0


def test_the_cli_publishes_a_past_dated_document_as_of_now_with_now(
    client: TestClient[Any], database: str, tmp_path: Any
) -> None:
    """`ledger prices publish` of a document dated before the active version says it never
    applies; `--now` publishes it as the active version instead."""
    import json

    from tests.api.test_prices_api import run_cli

    currency = fresh_currency()
    publish(client, simple_document(currency))
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps(simple_document(currency, input_rate="3", effective_at="2026-01-01T00:00:00Z"))
    )
    done = run_cli(database, "prices", "publish", str(path))
    assert done.returncode == 0, done.stderr
    assert "never applies and cannot be pinned" in done.stderr
    done = run_cli(database, "prices", "publish", "--now", str(path))
    assert done.returncode == 0, done.stderr
    version = json.loads(done.stdout)["version"]
    assert "not the active" not in done.stderr
    quote = {"currency": currency, "model": "t-simple", "max_output_tokens": 1}
    r = client.post("/v1/quotes", json=quote, headers=auth(GATEWAY))
    assert r.status_code == 200, r.text
    assert r.json()["price_version"] == version
