"""The finance pages over HTTP against the real PostgreSQL: paid and granted, grants and the
grant form, the hold page, statement filters with totals and their CSV, revenue with its
chart, newest-first holds. Every figure is compared with what the admin API answers.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import (
    FINANCE,
    VIEWER,
    assert_integrity,
    auth,
    call,
    fresh_currency,
    new_id,
    publish,
    reserve,
    simple_document,
    usage,
)
from tests.console.helpers import figure, hidden, login, notice


@pytest.fixture
def web(client: TestClient[Any]) -> Iterator[TestClient[Any]]:
    client.cookies.clear()
    yield client
    client.cookies.clear()


def grant(client: TestClient[Any], account_id: str, amount: str, **fields: Any) -> dict[str, Any]:
    expires = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    body = {
        "idempotency_key": new_id("g"),
        "amount": amount,
        "expires_at": expires,
        "reason": "promo",
        **fields,
    }
    r = client.post(f"/admin/v1/accounts/{account_id}/grants", json=body, headers=auth(FINANCE))
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


def transaction_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-transaction="(\d+)">', html)


def world(client: TestClient[Any], make_account: Any, deposit: str = "10") -> tuple[str, str, str]:
    currency = fresh_currency()
    version = publish(client, simple_document(currency))
    return currency, version, make_account(deposit, currency=currency)


def test_balance_shows_paid_and_granted_and_lists_the_grants(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    account_id = make_account("34.67")
    promo = grant(client, account_id, "5", priority=0, reference="launch")
    login(web, VIEWER)
    page = web.get(f"/console/accounts/{account_id}").text
    assert figure(page, "balance") == ("39.67 USD", "39.67 USD")
    assert figure(page, "paid") == ("34.67", "34.67")
    assert figure(page, "granted") == ("5.00", "5")
    grants = page.split('<table class="grants">')[1].split("</table>")[0]
    assert promo["grant_id"] in grants
    assert "active" in grants and "promotional" in grants and "launch" in grants
    listing = web.get("/console/accounts", params={"q": account_id}).text
    assert 'title="34.67">34.67<' in listing and 'title="5">5.00<' in listing


def test_grant_form_needs_finance_and_a_reason_and_posts_once(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    account_id = make_account("1")
    expires = (datetime.now(UTC) + timedelta(days=10)).date().isoformat()
    login(web, FINANCE)
    page = web.get(f"/console/accounts/{account_id}").text
    form = {
        "csrf_token": hidden(page, "csrf_token"),
        "idempotency_key": hidden(page, "idempotency_key", 2),
        "amount": "2.5",
        "expires_on": expires,
        "credit": "promotional",
        "reference": "campaign 7",
    }
    r = web.post(f"/console/accounts/{account_id}/grants", data={**form, "reason": "  "})
    assert r.status_code == 422
    assert notice(r.text) == "error: a reason is required"
    listed = client.get(f"/admin/v1/accounts/{account_id}/grants", headers=auth(VIEWER)).json()["data"]
    assert listed == []
    r = web.post(f"/console/accounts/{account_id}/grants", data={**form, "reason": "goodwill, ticket 77"})
    assert r.status_code == 200
    assert notice(r.text).startswith("ok: Grant of 2.5 USD posted")
    again = web.post(f"/console/accounts/{account_id}/grants", data={**form, "reason": "goodwill, ticket 77"})
    assert "already submitted" in notice(again.text)
    listed = client.get(f"/admin/v1/accounts/{account_id}/grants", headers=auth(VIEWER)).json()["data"]
    assert [(g["amount"], g["priority"], g["reason"], g["reference"]) for g in listed] == [
        ("2.5", 0, "goodwill, ticket 77", "campaign 7")
    ]
    assert listed[0]["expires_at"].startswith(f"{expires}T00:00:00")
    assert figure(again.text, "granted") == ("2.50", "2.5")
    audit = web.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER)).json()
    assert [(e["action"], e["role"]) for e in audit["data"] if e["action"] == "grant.create"] == [
        ("grant.create", "finance")
    ]
    # a viewer cannot grant
    login(web, VIEWER)
    page = web.get(f"/console/accounts/{account_id}").text
    r = web.post(
        f"/console/accounts/{account_id}/grants",
        data={**form, "csrf_token": hidden(page, "csrf_token"), "idempotency_key": new_id(), "reason": "x"},
    )
    assert r.status_code == 403
    assert (
        len(client.get(f"/admin/v1/accounts/{account_id}/grants", headers=auth(VIEWER)).json()["data"]) == 1
    )
    assert_integrity(client)


def test_hold_page_shows_the_full_id_timeline_charge_and_resolution(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    _, version, account_id = world(client, make_account)
    settled = reserve(client, account_id, max_output_tokens=100).json()
    assert call(client, settled["id"], "usage", usage(100, 10)).status_code == 200
    assert call(client, settled["id"], "settle", usage(300, 40)).status_code == 200
    released = reserve(client, account_id, max_output_tokens=100).json()
    r = client.post(
        f"/admin/v1/holds/{released['id']}/release",
        json={"reason": "customer cancelled, ticket 5"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 200, r.text
    login(web, VIEWER)

    page = web.get(f"/console/holds/{settled['id']}").text
    assert f'data-hold-id="{settled["id"]}">{settled["id"]}<' in page
    assert f'href="/console/prices/{version}"' in page
    timeline = page.split('<table class="timeline">')[1].split("</table>")[0]
    events = re.findall(r'<span class="kind kind-[\w-]+">([^<]+)</span>', timeline)
    assert events == ["created", "reserve", "settle", "resolved: settled"]
    lines = page.split('<table class="lines">')[1].split("</table>")[0]
    # 300 input tokens at 2 per 1M, 40 output at 10 per 1M: charge lines are shown exact
    assert '<td>input</td><td class="num">300</td><td class="num">2</td><td class="num">0.0006</td>' in lines
    assert '<td>output</td><td class="num">40</td><td class="num">10</td><td class="num">0.0004</td>' in lines
    assert figure(page, "charged") == ("0.001", "0.001")
    assert figure(page, "released") == ("0.002", "0.002")  # reserved 0.003
    assert '<td data-field="resolved_by">gateway</td>' in page

    page = web.get(f"/console/holds/{released['id']}").text
    assert '<td data-field="resolved_by">admin</td>' in page
    assert "customer cancelled, ticket 5" in page

    assert web.get("/console/holds/00000000-0000-7000-8000-000000000000").status_code == 404
    assert web.get("/console/holds/not-a-hold").status_code == 404


def test_holds_are_newest_first_and_the_unresolved_table_has_no_resolution_columns(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    _, _, account_id = world(client, make_account)
    first = reserve(client, account_id, max_output_tokens=10).json()["id"]
    second = reserve(client, account_id, max_output_tokens=10).json()["id"]
    login(web, VIEWER)
    page = web.get("/console/holds", params={"account_id": account_id}).text
    assert page.index(f"/console/holds/{second}") < page.index(f"/console/holds/{first}")
    assert '<th class="num">Charged</th>' in page
    page = web.get("/console/holds", params={"account_id": account_id, "state": "unresolved"}).text
    assert page.index(f"/console/holds/{second}") < page.index(f"/console/holds/{first}")
    assert "Charged" not in page and "Resolved by" not in page
    account = web.get(f"/console/accounts/{account_id}").text
    unresolved = account.split(">Unresolved holds</h2>")[1].split("</table>")[0]
    assert f"/console/holds/{second}" in unresolved and "Charged" not in unresolved


def test_statement_filters_totals_and_a_csv_of_exactly_the_view(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    currency, _, account_id = world(client, make_account, deposit="10")
    hold = reserve(client, account_id, max_output_tokens=100).json()
    assert call(client, hold["id"], "settle", usage(300, 40)).status_code == 200
    r = client.post(
        f"/admin/v1/accounts/{account_id}/adjustments",
        json={"idempotency_key": new_id("a"), "amount": "-0.25", "reason": "fee"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    api = client.get(f"/admin/v1/accounts/{account_id}/transactions", headers=auth(VIEWER)).json()["data"]
    by_kind = {t["kind"]: t["transaction_id"] for t in api}
    assert set(by_kind) == {"deposit", "reserve", "settle", "adjustment"}
    login(web, VIEWER)

    base = f"/console/accounts/{account_id}/statement"
    page = web.get(base).text
    # reserve rows hidden by default, newest first; the toggle shows them
    assert transaction_ids(page) == [by_kind["adjustment"], by_kind["settle"], by_kind["deposit"]]
    shown = web.get(base, params={"reserves": "1"}).text
    assert transaction_ids(shown) == [t["transaction_id"] for t in api]
    # the API's totals, for the whole period
    statement = client.get(f"/admin/v1/accounts/{account_id}/statement", headers=auth(VIEWER)).json()
    for kind, total in statement["totals"].items():
        row = page.split(f'<tr data-kind="{kind}"')[1].split("</tr>")[0]
        assert f'<td class="num">{total["count"]}</td>' in row
        assert f'title="{total["amount"]}"' in row
    assert statement["closing"]["balance"] == "9.749"
    assert figure(page, "closing") == (f"9.75 {currency}", f"9.749 {currency}")

    only = web.get(base, params=[("kind", "adjustment"), ("kind", "deposit")]).text
    assert transaction_ids(only) == [by_kind["adjustment"], by_kind["deposit"]]
    csv_link = re.search(r'href="(/console/accounts/[^"]+/statement\.csv\?[^"]+)"', only)
    assert csv_link, "no CSV link"
    r = web.get(csv_link.group(1).replace("&amp;", "&"))
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert rows[0]["kind"] == "opening" and rows[-1]["kind"] == "closing"
    assert sorted(x["transaction_id"] for x in rows[1:-1]) == sorted(transaction_ids(only))
    assert [x["amount"] for x in rows[1:-1]] == ["10", "-0.25"]  # exact in the CSV

    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    today = datetime.now(UTC).date().isoformat()
    assert transaction_ids(web.get(base, params={"from": today, "to": today}).text) == transaction_ids(page)
    later = web.get(base, params={"from": tomorrow, "to": tomorrow}).text
    assert transaction_ids(later) == [] and "No transactions in this period." in later
    # A period that ends later today: the CSV still holds the page's rows, not money moved since
    # (found in review: its as_of was the period's end, tomorrow 00:00).
    today_page = web.get(base, params=[("from", today), ("to", today), ("kind", "adjustment")]).text
    link = re.search(r'href="(/console/accounts/[^"]+/statement\.csv\?[^"]+)"', today_page)
    assert link, "no CSV link"
    r = client.post(
        f"/admin/v1/accounts/{account_id}/adjustments",
        json={"idempotency_key": new_id("a"), "amount": "-0.01", "reason": "later"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    r = web.get(link.group(1).replace("&amp;", "&"))
    assert r.headers["content-type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [x["transaction_id"] for x in rows[1:-1]] == transaction_ids(today_page)
    r = web.get(base, params={"from": tomorrow, "to": "2020-01-01"})
    assert r.status_code == 422
    assert web.get(base, params={"kind": "bogus"}).status_code == 422


def test_revenue_page_charts_days_and_models_with_the_reports_totals(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    currency, _, account_id = world(client, make_account)
    for p, c in ((300, 40), (1000, 500)):
        hold = reserve(client, account_id, max_output_tokens=500).json()
        assert call(client, hold["id"], "settle", usage(p, c)).status_code == 200
    api = client.get(
        "/admin/v1/reports/revenue", params={"currency": currency, "group_by": "model"}, headers=auth(VIEWER)
    ).json()
    assert Decimal(api["total"]) == Decimal("0.008")
    login(web, VIEWER)
    page = web.get("/console/revenue", params={"currency": currency}).text
    assert figure(page, "revenue") == ("0.008 " + currency, f"{api['total']} {currency}")
    day_chart = page.split('id="chart-day">')[1].split("</figure>")[0]
    assert day_chart.startswith('<svg class="chart"') and 'role="img"' in day_chart
    assert day_chart.count('<rect class="bar"') == 30  # one slot per day of the default 30 days
    today = datetime.now(UTC).date().isoformat()
    assert f"<title>{today}: 0.008 {currency}</title>" in day_chart
    model_chart = page.split('id="chart-model">')[1].split("</figure>")[0]
    assert f"<title>t-simple: 0.008 {currency}</title>" in model_chart
    r = web.get("/console/revenue.csv", params={"currency": currency, "group_by": "model"})
    assert r.status_code == 200
    assert list(csv.reader(io.StringIO(r.text)))[1][:2] == ["t-simple", "0.008"]


def test_account_page_shows_usage_by_model_and_a_chart_by_day(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    currency, _, account_id = world(client, make_account)
    for p, c in ((300, 40), (1000, 500)):
        hold = reserve(client, account_id, max_output_tokens=500).json()
        assert call(client, hold["id"], "settle", usage(p, c)).status_code == 200
    reserve(client, account_id, max_output_tokens=10)  # open: not usage yet
    login(web, VIEWER)
    page = web.get(f"/console/accounts/{account_id}").text
    row = page.split('<tr data-model="t-simple">')[1].split("</tr>")[0]
    cells = re.findall(r'<td class="num">([^<]*)', row)
    assert cells[:3] == ["2", "1,300", "540"]
    assert 'title="0.008"' in row  # 0.001 + 0.007, from the journal
    chart = page.split('id="chart-usage">')[1].split("</figure>")[0]
    assert chart.startswith('<svg class="chart"') and chart.count("<rect ") == 30
    today = datetime.now(UTC).date().isoformat()
    assert f"<title>{today}: 0.008 {currency}</title>" in chart
