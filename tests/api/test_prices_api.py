"""Price versions and quotes through the API, the CLI, and direct SQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from pricing.examples import contract_price_document
from tests.conftest import FINANCE, GATEWAY, TEST_ENV, VIEWER, auth, fresh_currency, publish, simple_document

ROOT = Path(__file__).resolve().parents[2]


def quote(client: TestClient[Any], body: dict[str, Any]) -> Any:
    return client.post("/v1/quotes", json=body, headers=auth(GATEWAY))


def test_publish_list_and_get(client: TestClient[Any]) -> None:
    currency = fresh_currency()
    doc = simple_document(currency, effective_at="2026-01-01T00:00:00Z")
    r = client.post("/admin/v1/price-versions", json=doc, headers=auth(FINANCE))
    assert r.status_code == 201
    body = r.json()
    assert body["version"].startswith("v")
    assert len(body["content_hash"]) == 64
    assert body["effective_at"] == "2026-01-01T00:00:00Z"
    assert body["models"] == ["t-simple"]
    assert body["published_by"].startswith("finance:")
    got = client.get(f"/admin/v1/price-versions/{body['version']}", headers=auth(VIEWER)).json()
    assert got["document"]["models"][0]["rates"] == {"input": "2", "output": "10"}
    listed = client.get("/admin/v1/price-versions", params={"limit": 500}, headers=auth(VIEWER)).json()[
        "data"
    ]
    assert body["version"] in [v["version"] for v in listed]
    missing = client.get("/admin/v1/price-versions/v99999999", headers=auth(VIEWER))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "price_version_not_found"
    assert client.post("/admin/v1/price-versions", json=doc, headers=auth(VIEWER)).status_code == 403
    audit = client.get("/admin/v1/audit-log", params={"target": body["version"]}, headers=auth(VIEWER)).json()
    assert [e["action"] for e in audit["data"]] == ["prices.publish"]


def _variant(change: Any) -> dict[str, Any]:
    doc = contract_price_document()
    doc["currency"] = "XQA"
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("change", "param"),
    [
        (lambda d: d["models"][0]["rates"].__setitem__("input", "-1"), "models[0].rates.input"),
        (lambda d: d["models"][0]["rates"].__setitem__("input", "abc"), "models[0].rates.input"),
        (lambda d: d["models"][0]["rates"].__setitem__("input", 2.5), "models[0].rates.input"),
        (lambda d: d["models"][0]["rates"].__setitem__("output", "1.0000001"), "models[0].rates.output"),
        (lambda d: d["models"][0]["rates"].pop("input"), "models[0].rates.input"),
        (lambda d: d["models"][1]["rates"].pop("output"), "models[1].rates.output"),
        (lambda d: d["models"][0].__setitem__("max_input_tokens", 0), "models[0].max_input_tokens"),
        (lambda d: d["models"][1].__setitem__("max_output_tokens", -5), "models[1].max_output_tokens"),
        (lambda d: d["models"].append(dict(d["models"][0])), "models[2].model"),
        (
            lambda d: d["models"][0]["long_context"]["rates"].pop("cache_write"),
            "models[0].long_context.rates",
        ),
    ],
)
def test_refused_documents_publish_nothing(client: TestClient[Any], change: Any, param: str) -> None:
    before = len(
        client.get("/admin/v1/price-versions", params={"limit": 500}, headers=auth(VIEWER)).json()["data"]
    )
    r = client.post("/admin/v1/price-versions", json=_variant(change), headers=auth(FINANCE))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "validation_error"
    assert r.json()["error"]["param"].startswith(param), r.json()
    after = len(
        client.get("/admin/v1/price-versions", params={"limit": 500}, headers=auth(VIEWER)).json()["data"]
    )
    assert after == before
    bad = client.post(
        "/admin/v1/price-versions",
        content=b"{nope",
        headers={**auth(FINANCE), "Content-Type": "application/json"},
    )
    assert bad.status_code == 400


def test_published_versions_are_immutable_in_sql(
    client: TestClient[Any], sql: psycopg.Connection[Any]
) -> None:
    version = publish(client, simple_document(fresh_currency()))
    for statement in (
        "UPDATE price_versions SET document = '{}'::jsonb WHERE version = %s",
        "DELETE FROM price_versions WHERE version = %s",
    ):
        with pytest.raises(psycopg.Error) as caught:
            sql.execute(statement, (version,))
        sql.rollback()
        assert "append-only" in str(caught.value)


def test_quotes_follow_the_contract_example(client: TestClient[Any], contract_version: str) -> None:
    base = {"model": "gpt-6-luna", "price_version": contract_version}
    std = quote(client, {**base, "usage": {"prompt_tokens": 272000, "completion_tokens": 1000}}).json()
    assert std["charge"]["tier"] == "standard"
    assert std["charge"]["amount"] == "0.695"  # 272000 x 2.5 + 1000 x 15, per 1e6
    long = quote(client, {**base, "usage": {"prompt_tokens": 272001, "completion_tokens": 1000}}).json()
    assert long["charge"]["tier"] == "long_context"
    assert long["charge"]["amount"] == "1.382505"  # 272001 x 5 + 1000 x 22.5
    claude = quote(
        client,
        {
            "model": "claude-sonnet-4-6",
            "price_version": contract_version,
            "usage": {
                "prompt_tokens": 10000,
                "completion_tokens": 100,
                "claude_cache_creation_5_m_tokens": 1000,
                "claude_cache_creation_1_h_tokens": 2000,
            },
        },
    ).json()
    lines = {line["category"]: line for line in claude["charge"]["lines"]}
    assert lines["cache_write_5m"] == {
        "category": "cache_write_5m",
        "tokens": 1000,
        "rate": "3.75",
        "amount": "0.00375",
    }
    assert lines["cache_write_1h"] == {
        "category": "cache_write_1h",
        "tokens": 2000,
        "rate": "6",
        "amount": "0.012",
    }
    assert lines["input"]["tokens"] == 7000
    res = quote(client, {**base, "max_output_tokens": 1000, "n": 2}).json()
    # 1,050,000 > 272,000 so the long-context input rate 5 applies: 5.25 + 2 x 1000 x 22.5 / 1e6
    assert res["reservation"]["amount"] == "5.295"
    assert res["reservation"]["tier"] == "long_context"
    small = quote(client, {**base, "max_input_tokens": 1000, "max_output_tokens": 10}).json()
    assert small["reservation"]["amount"] == "0.00265"  # 1000 x 2.5 + 10 x 15
    assert quote(client, {**base, "usage": {"prompt_tokens": 1}}).json()["error"]["code"] == "usage_invalid"
    both = quote(
        client, {**base, "usage": {"prompt_tokens": 1, "completion_tokens": 1}, "max_output_tokens": 2}
    )
    assert both.status_code == 422
    unknown = quote(client, {**base, "model": "nope"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert (
        quote(client, {**base, "max_output_tokens": 128001}).json()["error"]["code"] == "model_limit_exceeded"
    )
    assert client.post("/admin/v1/quotes", json=base, headers=auth(VIEWER)).status_code == 200


def test_active_version_follows_effective_at(client: TestClient[Any]) -> None:
    currency = fresh_currency()
    past = publish(client, simple_document(currency, input_rate="1", effective_at="2020-01-01T00:00:00Z"))
    publish(client, simple_document(currency, input_rate="9", effective_at="2999-01-01T00:00:00Z"))
    r = quote(
        client,
        {"model": "t-simple", "currency": currency, "usage": {"prompt_tokens": 10, "completion_tokens": 0}},
    )
    assert r.json()["price_version"] == past
    assert r.json()["charge"]["amount"] == "0.00001"


def run_cli(
    database: str, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **TEST_ENV, "LEDGER_DATABASE_URL": database, **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_publish_refresh_and_diff(database: str, tmp_path: Path) -> None:
    currency = fresh_currency()
    sheet = tmp_path / "sheet.json"
    sheet.write_text(json.dumps(simple_document(currency)))
    out = run_cli(database, "prices", "publish", str(sheet))
    assert out.returncode == 0, out.stderr
    first = json.loads(out.stdout)["version"]
    env = {"LEDGER_PRICE_SOURCES": str(sheet)}
    same = run_cli(database, "prices", "refresh", extra_env=env)
    assert same.returncode == 0, same.stderr
    # The sheet was published by hand first: the refresh finds its content is the newest
    # version's already, adopts it as its own last content, and publishes nothing.
    assert json.loads(same.stdout)["published"] is False
    assert json.loads(same.stdout)["outcome"] == "unchanged"
    sheet.write_text(json.dumps(simple_document(currency, output_rate="12")))
    moved = json.loads(run_cli(database, "prices", "refresh", extra_env=env).stdout)
    assert moved["published"] is True
    second = moved["version"]["version"]
    sheet.write_text(json.dumps(simple_document(currency, output_rate="120")))  # 10x: refused
    refused = run_cli(database, "prices", "refresh", extra_env=env)
    assert refused.returncode == 3
    body = json.loads(refused.stdout)
    assert body["published"] is False
    assert body["refused_changes"] == [
        {"model": "t-simple", "table": "standard", "category": "output", "old": "12", "new": "120"}
    ]
    forced = json.loads(run_cli(database, "prices", "refresh", "--force", extra_env=env).stdout)
    assert forced["published"] is True
    diff = run_cli(database, "prices", "diff", first, second)
    assert diff.returncode == 0, diff.stderr
    assert "output" in diff.stdout and "12" in diff.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"currency": currency, "models": []}))
    out = run_cli(database, "prices", "publish", str(bad))
    assert out.returncode == 2
    assert "refused" in out.stderr


def test_model_names_a_spreadsheet_would_run_are_refused(client: TestClient[Any]) -> None:
    listed = client.get("/admin/v1/price-versions", params={"limit": 500}, headers=auth(VIEWER))
    before = len(listed.json()["data"])
    for index, name in ((0, "=HYPERLINK(1)"), (0, "@cmd"), (1, "-2"), (1, "a model")):
        doc = simple_document(fresh_currency())
        doc["models"].append({**doc["models"][0], "model": "t-other"})
        doc["models"][index]["model"] = name
        r = client.post("/admin/v1/price-versions", json=doc, headers=auth(FINANCE))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "validation_error"
        assert r.json()["error"]["param"] == f"models[{index}].model"
    listed = client.get("/admin/v1/price-versions", params={"limit": 500}, headers=auth(VIEWER))
    assert len(listed.json()["data"]) == before
    schema = client.get("/schema/openapi.json").json()["components"]["schemas"]
    model = next(s for n, s in schema.items() if n.endswith("ModelPrice"))["properties"]["model"]
    assert model["pattern"] == "^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$"
