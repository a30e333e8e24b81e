"""Refresh never reverts what finance published; publishing answers duplicates and guards drops.

The rule under test (docs/decisions.md, "Publishing"): a refresh compares what its sources produce
with what they produced at its own last refresh, publishes only when they changed and
no version was published by hand since, and never publishes an empty diff. A POST of
the newest version's content answers that version (200, created false); a POST that
drops models of the active version is 422 unless `"replace": true`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from litestar.testing import TestClient

from tests.api.test_prices_api import run_cli
from tests.conftest import FINANCE, GATEWAY, VIEWER, auth, fresh_currency, simple_document


def two_models(currency: str, *, input_rate: str = "2", output_rate: str = "10") -> dict[str, Any]:
    doc = simple_document(currency, input_rate=input_rate, output_rate=output_rate)
    doc["models"].append(
        {
            "model": "t-other",
            "max_input_tokens": 1000,
            "max_output_tokens": 500,
            "rates": dict(input="3", output="9"),
        }
    )
    return doc


def post(client: TestClient[Any], doc: dict[str, Any]) -> Any:
    return client.post("/admin/v1/price-versions", json=doc, headers=auth(FINANCE))


def active_input_charge(client: TestClient[Any], currency: str) -> tuple[str, str]:
    """(active version, charge for 1,000,000 prompt tokens of t-simple) = the input rate."""
    r = client.post(
        "/v1/quotes",
        json={
            "model": "t-simple",
            "currency": currency,
            "usage": {"prompt_tokens": 1000, "completion_tokens": 0},
        },
        headers=auth(GATEWAY),
    )
    assert r.status_code == 200, r.text
    return r.json()["price_version"], r.json()["charge"]["amount"]


def versions_of(client: TestClient[Any], currency: str) -> list[str]:
    listed = client.get("/admin/v1/price-versions", params={"limit": 500}, headers=auth(VIEWER)).json()
    return [v["version"] for v in listed["data"] if v["currency"] == currency]


def refresh(database: str, sheet: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = run_cli(database, "prices", "refresh", *args, extra_env={"LEDGER_PRICE_SOURCES": str(sheet)})
    assert done.returncode in (0, 3, 4), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_refresh_never_reverts_a_finance_publish(
    client: TestClient[Any], database: str, tmp_path: Path
) -> None:
    currency = fresh_currency()
    sheet = tmp_path / "sources.json"
    sheet.write_text(json.dumps(two_models(currency)))
    code, first = refresh(database, sheet)
    assert (code, first["outcome"], first["published"]) == (0, "publish", True)
    by_refresh = first["version"]["version"]

    finance = post(client, two_models(currency, input_rate="1"))  # finance lowers input 2 -> 1
    assert finance.status_code == 201, finance.text
    v_finance = finance.json()["version"]
    assert finance.json()["active"] is True and finance.json()["created"] is True

    # The sources did not change since the refresh: nothing to publish, finance's price stays.
    code, again = refresh(database, sheet)
    assert (code, again["outcome"], again["published"]) == (0, "unchanged", False)
    assert again["last_refresh"] == by_refresh and again["against"] == v_finance
    assert again["diff"]["rates"] == [
        {"model": "t-simple", "table": "standard", "category": "input", "old": "1", "new": "2"}
    ]
    assert active_input_charge(client, currency) == (v_finance, "0.001")
    assert versions_of(client, currency) == [v_finance, by_refresh]

    # The sources change: still not published over finance's version (exit 4, named).
    sheet.write_text(json.dumps(two_models(currency, output_rate="12")))
    code, blocked = refresh(database, sheet)
    assert (code, blocked["outcome"], blocked["published"]) == (4, "refuse_newer_version", False)
    assert blocked["newer_version"] == v_finance and v_finance in blocked["reason"]
    code, dry = refresh(database, sheet, "--dry-run")
    assert (code, dry["dry_run"], dry["outcome"], dry["published"]) == (
        0,
        True,
        "refuse_newer_version",
        False,
    )
    assert {(c["category"], c["old"], c["new"]) for c in dry["diff"]["rates"]} == {
        ("input", "1", "2"),
        ("output", "10", "12"),
    }
    assert active_input_charge(client, currency) == (v_finance, "0.001")
    assert versions_of(client, currency) == [v_finance, by_refresh]

    # --force publishes over it, and the audit log says over what.
    code, forced = refresh(database, sheet, "--force")
    assert (code, forced["outcome"], forced["published"]) == (0, "publish", True)
    assert forced["newer_version"] == v_finance
    v_forced = forced["version"]["version"]
    audit = client.get("/admin/v1/audit-log", params={"target": v_forced}, headers=auth(VIEWER)).json()[
        "data"
    ]
    assert [(e["action"], e["details"]["forced_over"]) for e in audit] == [("prices.refresh", v_finance)]
    code, after = refresh(database, sheet)
    assert (code, after["outcome"]) == (0, "unchanged")
    assert versions_of(client, currency) == [v_forced, v_finance, by_refresh]


def test_a_dry_run_publishes_nothing_and_records_nothing(
    client: TestClient[Any], database: str, tmp_path: Path, sql: psycopg.Connection[Any]
) -> None:
    currency = fresh_currency()
    sheet = tmp_path / "sources.json"
    sheet.write_text(json.dumps(simple_document(currency)))
    code, dry = refresh(database, sheet, "--dry-run")
    assert (code, dry["outcome"], dry["published"], dry["version"]) == (0, "publish", False, None)
    assert versions_of(client, currency) == []
    assert sql.execute(
        "SELECT count(*) FROM price_refreshes WHERE currency = %s", (currency,)
    ).fetchone() == (0,)
    refresh(database, sheet)
    sheet.write_text(json.dumps(simple_document(currency, input_rate="2.5")))
    code, dry = refresh(database, sheet, "--dry-run")
    assert (code, dry["outcome"], dry["published"]) == (0, "publish", False)
    assert dry["diff"]["rates"] == [
        {"model": "t-simple", "table": "standard", "category": "input", "old": "2", "new": "2.5"}
    ]
    assert len(versions_of(client, currency)) == 1


def test_sources_changing_only_their_source_text_publish_nothing(
    client: TestClient[Any], database: str, tmp_path: Path
) -> None:
    currency = fresh_currency()
    sheet = tmp_path / "sources.json"
    sheet.write_text(json.dumps(simple_document(currency)))
    refresh(database, sheet)
    relabelled = simple_document(currency)
    relabelled["source"] = "the same prices, read again on another day"
    sheet.write_text(json.dumps(relabelled))
    code, result = refresh(database, sheet)
    assert (code, result["outcome"], result["published"]) == (0, "unchanged", False)
    assert len(versions_of(client, currency)) == 1
    assert refresh(database, sheet)[1]["reason"].startswith(
        "the sources are unchanged since the last refresh"
    )


def test_sources_changing_only_limits_or_a_retirement_publish_and_show_them(
    client: TestClient[Any], database: str, tmp_path: Path
) -> None:
    currency = fresh_currency()
    sheet = tmp_path / "sources.json"
    sheet.write_text(json.dumps(simple_document(currency)))
    refresh(database, sheet)
    catalogued = simple_document(currency)
    catalogued["models"][0].update(max_n=2, default_output_tokens=100, retires_at="2027-04-01T00:00:00Z")
    sheet.write_text(json.dumps(catalogued))
    code, result = refresh(database, sheet, "--dry-run")
    assert (code, result["outcome"], result["published"]) == (0, "publish", False)
    code, result = refresh(database, sheet)
    assert (code, result["outcome"], result["published"]) == (0, "publish", True)
    assert result["diff"]["rates"] == []
    assert result["diff"]["limits"] == [
        {"model": "t-simple", "limit": "default_output_tokens", "old": None, "new": 100},
        {"model": "t-simple", "limit": "max_n", "old": None, "new": 2},
    ]
    assert result["diff"]["retirements"] == [
        {"model": "t-simple", "old": None, "new": "2027-04-01T00:00:00Z"}
    ]
    assert len(versions_of(client, currency)) == 2
    stored = client.get(f"/admin/v1/price-versions/{result['version']['version']}", headers=auth(VIEWER))
    model = stored.json()["document"]["models"][0]
    assert (model["max_n"], model["default_output_tokens"], model["retires_at"]) == (
        2,
        100,
        "2027-04-01T00:00:00Z",
    )


def test_the_refresh_job_records_a_skip_over_a_finance_version(
    client: TestClient[Any], settings: Any, sa_url: str, tmp_path: Path, sql: psycopg.Connection[Any]
) -> None:
    from workers.actors import JobContext, refresh_prices

    currency = fresh_currency()
    sheet = tmp_path / "sources.json"
    sheet.write_text(json.dumps(simple_document(currency)))
    ctx = JobContext(replace(settings, price_sources=(str(sheet),)), sa_url)
    assert refresh_prices(ctx)["summary"]["outcome"] == "publish"
    v_finance = post(client, simple_document(currency, input_rate="1")).json()["version"]
    sheet.write_text(json.dumps(simple_document(currency, output_rate="11")))

    run = refresh_prices(ctx)

    assert run["ok"] is True and run["summary"]["skipped"] is True
    assert (
        run["summary"]["outcome"] == "refuse_newer_version" and run["summary"]["newer_version"] == v_finance
    )
    row = sql.execute(
        "SELECT ok, summary->>'outcome', summary->>'newer_version' FROM job_runs "
        "WHERE job = 'refresh_prices' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert row == (True, "refuse_newer_version", v_finance)
    assert active_input_charge(client, currency) == (v_finance, "0.001")


def test_an_identical_post_answers_the_existing_version(client: TestClient[Any]) -> None:
    currency = fresh_currency()
    first = post(client, simple_document(currency))
    assert first.status_code == 201
    assert (first.json()["created"], first.json()["active"]) == (True, True)
    same = post(client, simple_document(currency))
    assert same.status_code == 200, same.text
    assert same.json()["version"] == first.json()["version"]
    assert (same.json()["created"], same.json()["active"]) == (False, True)
    assert versions_of(client, currency) == [first.json()["version"]]
    # Other rates, then the first rates again: a new version (reverting is an explicit act).
    other = post(client, simple_document(currency, input_rate="3")).json()["version"]
    back = post(client, simple_document(currency))
    assert back.status_code == 201 and back.json()["version"] not in (first.json()["version"], other)
    # A later effective_at is a different publication, even with the same rates.
    dated = post(client, simple_document(currency, effective_at="2999-01-01T00:00:00Z"))
    assert dated.status_code == 201 and (dated.json()["created"], dated.json()["active"]) == (True, False)
    again = post(client, simple_document(currency, effective_at="2999-01-01T00:00:00Z"))
    assert again.status_code == 200 and again.json()["version"] == dated.json()["version"]
    assert again.json()["active"] is False
    assert len(versions_of(client, currency)) == 4


def test_a_post_dropping_models_needs_replace(client: TestClient[Any], sql: psycopg.Connection[Any]) -> None:
    currency = fresh_currency()
    full = post(client, two_models(currency))
    assert full.status_code == 201
    dropping = simple_document(currency, input_rate="4")
    r = post(client, dropping)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("validation_error", "models")
    assert "t-other" in error["message"] and full.json()["version"] in error["message"]
    assert versions_of(client, currency) == [full.json()["version"]]
    bad = post(client, {**dropping, "replace": "yes"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "replace"
    assert post(client, {**dropping, "replace": False}).status_code == 422

    replaced = post(client, {**dropping, "replace": True})

    assert replaced.status_code == 201, replaced.text
    assert replaced.json()["models"] == ["t-simple"] and replaced.json()["active"] is True
    stored = sql.execute(
        "SELECT document ? 'replace', content_hash FROM price_versions WHERE version = %s",
        (replaced.json()["version"],),
    ).fetchone()
    assert stored is not None and stored[0] is False
    # `replace` is not part of the content: the same document without it is the same version.
    assert post(client, dropping).json() == {**replaced.json(), "created": False}
    assert stored[1] == replaced.json()["content_hash"]


def test_cli_publish_replace_and_identical(database: str, tmp_path: Path) -> None:
    currency = fresh_currency()
    full, dropping = tmp_path / "full.json", tmp_path / "dropping.json"
    full.write_text(json.dumps(two_models(currency)))
    dropping.write_text(json.dumps(simple_document(currency)))
    assert run_cli(database, "prices", "publish", str(full)).returncode == 0
    refused = run_cli(database, "prices", "publish", str(dropping))
    assert refused.returncode == 2 and "models" in refused.stderr and "t-other" in refused.stderr
    done = run_cli(database, "prices", "publish", str(dropping), "--replace")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["created"] is True
    again = run_cli(database, "prices", "publish", str(dropping))
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False
    assert "nothing published" in again.stderr
