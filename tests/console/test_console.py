"""The finance console over HTTP (Litestar TestClient, real PostgreSQL): login, roles, CSRF,
money forms, search, statement and the read-only pages.

The session-scoped TestClient is shared with the API tests; its cookie jar is cleared
around every test here so no console session leaks into another test.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.conftest import (
    ADMIN,
    FINANCE,
    GATEWAY,
    VIEWER,
    assert_integrity,
    auth,
    fresh_currency,
    new_id,
    publish,
    simple_document,
)
from tests.console.helpers import cells, figure, hidden, login, notice


@pytest.fixture
def web(client: TestClient[Any]) -> Iterator[TestClient[Any]]:
    client.cookies.clear()
    yield client
    client.cookies.clear()


def balance(client: TestClient[Any], account_id: str) -> str:
    r = client.get(f"/admin/v1/accounts/{account_id}/balance", headers=auth(VIEWER))
    assert r.status_code == 200, r.text
    value: str = r.json()["balance"]
    return value


def journal(client: TestClient[Any], account_id: str) -> list[dict[str, Any]]:
    r = client.get(f"/admin/v1/accounts/{account_id}/transactions", headers=auth(VIEWER))
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def post_form(web: TestClient[Any], account_id: str, kind: str, page: str, **fields: str) -> Any:
    """Submit the deposit (form 0) or adjustment (form 1) form as rendered in `page`."""
    index = 0 if kind == "deposits" else 1
    data = {
        "csrf_token": hidden(page, "csrf_token"),
        "idempotency_key": hidden(page, "idempotency_key", index),
        **fields,
    }
    return web.post(f"/console/accounts/{account_id}/{kind}", data=data)


# --- login, session, logout --------------------------------------------------------


def test_pages_redirect_to_login_until_logged_in(web: TestClient[Any]) -> None:
    r = web.get("/console/accounts?q=abc", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/console/login?next=/console/accounts%3Fq%3Dabc"
    r = web.post("/console/accounts/x/deposits", data={"amount": "1"}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/console/login")


def test_login_sets_a_signed_http_only_strict_cookie_without_the_token(web: TestClient[Any]) -> None:
    r = login(web, FINANCE, next_path="/console/integrity")
    assert r.status_code == 303
    assert r.headers["location"] == "/console/integrity"
    set_cookie = [v for k, v in r.headers.multi_items() if k == "set-cookie" and "ledger_console=" in v]
    assert len(set_cookie) == 1
    header = set_cookie[0]
    assert "HttpOnly" in header
    assert "samesite=strict" in header.lower()
    assert "Path=/console" in header
    assert FINANCE not in header
    page = web.get("/console/integrity")
    assert page.status_code == 200
    assert 'class="role role-finance"' in page.text
    assert FINANCE not in page.text


@pytest.mark.parametrize("token", ["wrong-token", GATEWAY, ""])
def test_login_refuses_unknown_and_gateway_tokens(web: TestClient[Any], token: str) -> None:
    r = login(web, token)
    assert r.status_code == 401
    assert "not an admin token" in r.text
    assert "ledger_console" not in web.cookies
    assert web.get("/console/accounts", follow_redirects=False).status_code == 303


def test_login_needs_the_form_nonce_and_refuses_open_redirects(web: TestClient[Any]) -> None:
    # A cross-site login post has no nonce cookie (SameSite=Strict) and no matching field.
    r = web.post("/console/login", data={"nonce": "guess", "token": FINANCE}, follow_redirects=False)
    assert r.status_code == 403
    assert "ledger_console" not in web.cookies
    for target in ("https://evil.example/", "//evil.example/x", "/admin/v1/accounts"):
        r = login(web, FINANCE, next_path=target)
        assert r.status_code == 303
        assert r.headers["location"] == "/console/accounts"


def test_tampered_cookie_is_refused_and_logout_ends_the_session(web: TestClient[Any]) -> None:
    login(web, VIEWER)
    cookie = web.cookies["ledger_console"]
    web.cookies.set("ledger_console", cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB"))
    assert web.get("/console/accounts", follow_redirects=False).status_code == 303
    login(web, VIEWER)
    page = web.get("/console/accounts")
    # logout without the CSRF token does nothing
    r = web.post("/console/logout", data={}, follow_redirects=False)
    assert r.headers["location"] == "/console/accounts"
    assert web.get("/console/accounts", follow_redirects=False).status_code == 200
    r = web.post(
        "/console/logout", data={"csrf_token": hidden(page.text, "csrf_token")}, follow_redirects=False
    )
    assert r.status_code == 303
    assert r.headers["location"] == "/console/login"
    assert "ledger_console" not in web.cookies
    assert web.get("/console/accounts", follow_redirects=False).status_code == 303


# --- roles and CSRF -------------------------------------------------------------------


def test_viewer_sees_the_account_but_cannot_move_money(web: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("7.5")
    login(web, VIEWER)
    page = web.get(f"/console/accounts/{account_id}")
    assert page.status_code == 200
    assert figure(page.text, "balance") == ("7.50 USD", "7.5 USD")
    assert "/deposits" not in page.text and "/grants" not in page.text
    assert "deposits, adjustments and grants need finance" in page.text
    r = web.post(
        f"/console/accounts/{account_id}/deposits",
        data={
            "csrf_token": hidden(page.text, "csrf_token"),
            "idempotency_key": new_id("k"),
            "amount": "100",
            "reason": "x",
        },
    )
    assert r.status_code == 403
    assert "finance or above is required" in r.text
    assert balance(web, account_id) == "7.5"


def test_money_forms_need_the_sessions_csrf_token(web: TestClient[Any], make_account: Any) -> None:
    account_id = make_account("1")
    login(web, FINANCE)
    page = web.get(f"/console/accounts/{account_id}").text
    key = hidden(page, "idempotency_key")
    for token in (None, "", "forged", hidden(page, "csrf_token") + "x"):
        data = {"idempotency_key": key, "amount": "5", "reason": "wire"}
        if token is not None:
            data["csrf_token"] = token
        r = web.post(f"/console/accounts/{account_id}/deposits", data=data)
        assert r.status_code == 403, token
        assert "CSRF" in r.text
    # a token from another (valid) session does not work either
    other = login(web, ADMIN)
    assert other.status_code == 303
    r = web.post(
        f"/console/accounts/{account_id}/deposits",
        data={"csrf_token": hidden(page, "csrf_token"), "idempotency_key": key, "amount": "5", "reason": "w"},
    )
    assert r.status_code == 403
    assert balance(web, account_id) == "1"
    assert len(journal(web, account_id)) == 1


# --- money forms -------------------------------------------------------------------


def test_deposit_changes_the_balance_exactly_and_a_double_submit_posts_once(
    web: TestClient[Any], make_account: Any
) -> None:
    account_id = make_account("0.1")
    login(web, FINANCE)
    page = web.get(f"/console/accounts/{account_id}").text
    first = post_form(web, account_id, "deposits", page, amount="10.000000000001", reason="wire 2026-07-01")
    assert first.status_code == 200
    assert notice(first.text).startswith("ok: Deposit of 10.000000000001 USD posted")
    assert "balance now 10.100000000001" in first.text
    assert balance(web, account_id) == "10.100000000001"
    # the same rendered form again (double click, browser resubmit): one movement only
    again = post_form(web, account_id, "deposits", page, amount="10.000000000001", reason="wire 2026-07-01")
    assert again.status_code == 200
    assert "already submitted" in notice(again.text)
    assert balance(web, account_id) == "10.100000000001"
    deposits = [t for t in journal(web, account_id) if t["kind"] == "deposit"]
    assert [(t["amount"], t["reference"]) for t in deposits] == [
        ("10.000000000001", "wire 2026-07-01"),
        ("0.1", None),
    ]
    # the page after a success carries a fresh key: a second deposit is a new movement
    assert hidden(first.text, "idempotency_key") != hidden(page, "idempotency_key")
    second = post_form(web, account_id, "deposits", first.text, amount="0.9", reason="wire 2")
    assert notice(second.text).startswith("ok:")
    assert balance(web, account_id) == "11.000000000001"
    # audit-logged with the console user's identity, like the API
    audit = web.get("/admin/v1/audit-log", params={"target": account_id}, headers=auth(VIEWER)).json()
    actions = [(e["action"], e["role"], e["details"].get("reference")) for e in audit["data"]]
    assert ("account.deposit", "finance", "wire 2026-07-01") in actions
    finance_actor = next(e["actor"] for e in audit["data"] if e["details"].get("reference") == "wire 2")
    assert finance_actor.startswith("finance:") and FINANCE not in finance_actor
    assert_integrity(web)


def test_adjustment_needs_a_reason_and_moves_the_signed_amount(
    web: TestClient[Any], make_account: Any
) -> None:
    account_id = make_account("5")
    login(web, FINANCE)
    page = web.get(f"/console/accounts/{account_id}").text
    r = post_form(web, account_id, "adjustments", page, amount="-1.25", reason="")
    assert r.status_code == 422
    assert notice(r.text) == "error: a reason is required"
    assert balance(web, account_id) == "5"
    r = post_form(web, account_id, "adjustments", page, amount="-1.25", reason="goodwill reversal, ticket 9")
    assert r.status_code == 200
    assert notice(r.text).startswith("ok: Adjustment of -1.25 USD posted")
    assert balance(web, account_id) == "3.75"
    latest = journal(web, account_id)[0]
    assert (latest["kind"], latest["amount"], latest["reason"]) == (
        "adjustment",
        "-1.25",
        "goodwill reversal, ticket 9",
    )


@pytest.mark.parametrize(
    ("amount", "reason", "status", "message"),
    [
        ("-5", "wire", 422, "greater than zero"),
        ("0", "wire", 422, "greater than zero"),
        ("1e3", "wire", 422, "amount"),
        ("abc", "wire", 422, "amount"),
        ("0.0000000000001", "wire", 422, "amount"),
        ("5", "   ", 422, "a reason is required"),
        ("5", "x" * 501, 422, "500"),
    ],
)
def test_refused_deposits_show_a_message_and_change_nothing(
    web: TestClient[Any], make_account: Any, amount: str, reason: str, status: int, message: str
) -> None:
    account_id = make_account("2")
    login(web, FINANCE)
    page = web.get(f"/console/accounts/{account_id}").text
    r = post_form(web, account_id, "deposits", page, amount=amount, reason=reason)
    assert r.status_code == status
    text = notice(r.text)
    assert text.startswith("error:") and message in text, text
    # the form is shown again with what was typed
    assert f'value="{amount}"' in r.text
    assert balance(web, account_id) == "2"
    assert len(journal(web, account_id)) == 1


def test_reusing_a_used_form_key_for_another_amount_is_refused(
    web: TestClient[Any], make_account: Any
) -> None:
    account_id = make_account()
    login(web, FINANCE)
    page = web.get(f"/console/accounts/{account_id}").text
    assert notice(post_form(web, account_id, "deposits", page, amount="3", reason="w").text).startswith("ok:")
    r = post_form(web, account_id, "deposits", page, amount="30", reason="w")
    assert r.status_code == 409
    assert "already used with a different request" in notice(r.text)
    assert balance(web, account_id) == "3"


def test_money_form_on_unknown_account_is_a_404_page(web: TestClient[Any]) -> None:
    login(web, FINANCE)
    page = web.get("/console/accounts").text
    r = web.post(
        "/console/accounts/no-such-account/deposits",
        data={"csrf_token": hidden(page, "csrf_token"), "idempotency_key": "k", "amount": "1", "reason": "w"},
    )
    assert r.status_code == 404
    assert "account_not_found" in r.text


# --- search, statement, CSV ------------------------------------------------------------


def test_account_search_matches_substrings_case_insensitively(
    web: TestClient[Any], client: TestClient[Any]
) -> None:
    tag = new_id("Srch")
    ids = [f"{tag}-alpha", f"{tag}-beta", f"x-{tag.lower()}-gamma", f"{tag}_1", f"{tag}-1"]
    for account_id in ids:
        r = client.post("/admin/v1/accounts", json={"account_id": account_id}, headers=auth(FINANCE))
        assert r.status_code == 201, r.text
    login(web, VIEWER)
    page = web.get("/console/accounts", params={"q": tag.upper()}).text
    for account_id in ids:
        assert f">{account_id}</a>" in page
    page = web.get("/console/accounts", params={"q": f"{tag}-b"}).text
    assert f">{tag}-beta</a>" in page and f">{tag}-alpha</a>" not in page
    # % and _ are literal characters, not wildcards
    page = web.get("/console/accounts", params={"q": f"{tag}_1"}).text
    assert f">{tag}_1</a>" in page and f">{tag}-1</a>" not in page
    page = web.get("/console/accounts", params={"q": f"{tag}%a"}).text
    assert "No account matches" in page


def test_statement_shows_running_balance_and_csv_adds_up(
    web: TestClient[Any], make_account: Any, client: TestClient[Any]
) -> None:
    account_id = make_account("100")
    for key, amount, reason in (("a1", "-0.000000000001", "rounding"), ("a2", "2.5", "=HYPERLINK(1)")):
        r = client.post(
            f"/admin/v1/accounts/{account_id}/adjustments",
            json={"idempotency_key": key, "amount": amount, "reason": reason},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
    login(web, VIEWER)
    page = web.get(f"/console/accounts/{account_id}/statement")
    assert page.status_code == 200
    assert f"/console/accounts/{account_id}/statement.csv" in page.text
    # newest first, rounded for reading, exact in the title
    assert cells(page.text, "num strong") == [
        ("102.50", "102.499999999999"),
        ("100.00", "99.999999999999"),
        ("100.00", "100"),
    ]
    r = web.get(f"/console/accounts/{account_id}/statement.csv")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert f'filename="statement-{account_id}.csv"' in r.headers["content-disposition"]
    every = list(csv.DictReader(io.StringIO(r.text)))  # the admin API's statement CSV
    assert (every[0]["kind"], every[0]["balance_after"]) == ("opening", "0")
    assert (every[-1]["kind"], every[-1]["balance_after"]) == ("closing", "102.499999999999")
    rows = every[1:-1]
    assert [(x["kind"], x["amount"], x["balance_after"]) for x in rows] == [
        ("deposit", "100", "100"),
        ("adjustment", "-0.000000000001", "99.999999999999"),
        ("adjustment", "2.5", "102.499999999999"),
    ]
    assert sum(Decimal(x["amount"]) for x in rows) == Decimal(rows[-1]["balance_after"])
    assert rows[2]["reason"] == "'=HYPERLINK(1)"  # not a live formula in a spreadsheet


# --- holds, reconciliation, integrity, prices --------------------------------------------


def test_read_pages_show_holds_runs_integrity_and_price_diff(
    web: TestClient[Any], client: TestClient[Any], make_account: Any
) -> None:
    currency = fresh_currency()
    old = publish(client, simple_document(currency, input_rate="2", output_rate="10"))
    new = publish(client, simple_document(currency, input_rate="2.5", output_rate="10"))
    account_id = make_account("1", currency=currency)
    r = client.post(
        "/v1/holds",
        json={
            "account_id": account_id,
            "idempotency_key": "h1",
            "model": "t-simple",
            "max_output_tokens": 100,
        },
        headers=auth(GATEWAY),
    )
    assert r.status_code == 201, r.text
    hold = r.json()
    assert client.post("/admin/v1/reconciliation/runs", headers=auth(FINANCE)).status_code == 201
    login(web, VIEWER)

    page = web.get(f"/console/accounts/{account_id}").text
    assert f'href="/console/holds/{hold["id"]}" title="{hold["id"]}"' in page
    assert figure(page, "held") == ("0.0035", "0.0035")
    assert figure(page, "available") == ("1.00", "0.9965")
    page = web.get("/console/holds", params={"state": "open", "account_id": account_id}).text
    assert f'href="/console/holds/{hold["id"]}"' in page and f'title="{hold["amount"]} {currency}"' in page
    page = web.get("/console/holds", params={"state": "settled", "account_id": account_id}).text
    assert hold["id"] not in page
    assert web.get("/console/holds", params={"state": "bogus"}).status_code == 422

    page = web.get("/console/reconciliation").text
    assert "<td>api</td>" in page

    page = web.get("/console/integrity").text
    assert 'data-integrity="ok"' in page

    page = web.get("/console/prices").text
    assert f'href="/console/prices/diff?old={old}&new={new}"' in page
    page = web.get(f"/console/prices/{new}").text
    assert "t-simple" in page and "input <b>2.5</b>" in page
    diff = web.get("/console/prices/diff", params={"old": old, "new": new})
    assert diff.status_code == 200
    assert '<td>input</td>\n  <td class="num bad">2</td><td class="num good">2.5</td>' in diff.text
    assert "output" not in diff.text.split("<h2>Rates</h2>")[1].split("</table>")[0]
    missing = web.get("/console/prices/diff", params={"old": old, "new": "v999999999"})
    assert missing.status_code == 404
    assert "price_version_not_found" in missing.text


def test_the_price_diff_shows_catalogue_limits_and_retirements(
    web: TestClient[Any], client: TestClient[Any]
) -> None:
    currency = fresh_currency()
    old = publish(client, simple_document(currency))
    doc = simple_document(currency)
    doc["models"][0].update(max_n=2, default_output_tokens=100, retires_at="2027-04-01T00:00:00Z")
    new = publish(client, doc)
    login(web, VIEWER)
    page = web.get("/console/prices/diff", params={"old": old, "new": new}).text
    limits = page.split("<h2>Limits</h2>")[1].split("</table>")[0]
    assert '<td>t-simple</td><td>max_n</td><td class="num">—</td><td class="num">2</td>' in limits
    assert '<td>default_output_tokens</td><td class="num">—</td><td class="num">100</td>' in limits
    retirements = page.split("<h2>Retirements</h2>")[1].split("</table>")[0]
    assert "<td>t-simple</td><td>—</td><td>2027-04-01T00:00:00Z</td>" in retirements
    assert "No differences" not in page
    page = web.get(f"/console/prices/{new}").text
    assert (
        '<span class="muted catalogue">default output 100 · n ≤ 2 · '
        '<span class="bad">retires 2027-04-01T00:00:00Z</span></span>'
    ) in page
    assert "catalogue" not in web.get(f"/console/prices/{old}").text


def test_statement_download_neutralises_formulas_after_blanks(
    web: TestClient[Any], make_account: Any, client: TestClient[Any]
) -> None:
    account_id = make_account()
    for reference in (" =1+1", "\n=cmd", "\t@x", "ok"):
        r = client.post(
            f"/admin/v1/accounts/{account_id}/deposits",
            json={"idempotency_key": new_id("dep"), "amount": "1", "reference": reference},
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
    r = client.post(
        f"/admin/v1/accounts/{account_id}/adjustments",
        json={"idempotency_key": new_id("adj"), "amount": "-1.5", "reason": " -2"},
        headers=auth(FINANCE),
    )
    assert r.status_code == 201, r.text
    login(web, VIEWER)
    r = web.get(f"/console/accounts/{account_id}/statement.csv")
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.text)))[1:-1]
    assert [(x["amount"], x["reference"], x["reason"]) for x in rows] == [
        ("1", "' =1+1", ""),
        ("1", "'\n=cmd", ""),
        ("1", "'\t@x", ""),
        ("1", "ok", ""),
        ("-1.5", "", "' -2"),
    ]
