"""The OpenAPI document and its docs page: what they promise, checked against the service."""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
import pytest
from litestar.testing import TestClient

from pricing.document import CATEGORIES
from pricing.usage import WIRE_PATHS
from tests.conftest import GATEWAY, VIEWER, auth, new_id, reserve

ERROR = {"$ref": "#/components/schemas/ErrorBody"}
METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def document(client: TestClient[Any]) -> dict[str, Any]:
    r = client.get("/schema/openapi.json")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


def validator(document: dict[str, Any], ref: dict[str, str]) -> Any:
    return jsonschema_rs.validator_for({**ref, "components": document["components"]})


@pytest.mark.parametrize("page", ["/schema", "/schema/swagger"])
def test_docs_page_loads_only_local_assets(client: TestClient[Any], page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200
    html = r.text
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert urls, html
    assert all(url.startswith("/") and not url.startswith("//") for url in urls), urls
    assert "http://" not in html and "https://" not in html, html
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 100, url
    types = {client.get(url).headers["content-type"].split(";")[0] for url in urls}
    assert {"text/css", "text/javascript"} <= types or {"text/css", "application/javascript"} <= types, types


def test_bearer_security_on_the_guarded_surfaces_only(document: dict[str, Any]) -> None:
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, method, op in operations(document):
        guarded = path.startswith(("/v1/", "/admin/v1/"))
        assert op.get("security") == ([{"bearer": []}] if guarded else None), (method, path)
    assert {"/healthz", "/readyz", "/metrics"} <= set(document["paths"])


def test_every_refusal_is_documented_in_the_one_error_shape(document: dict[str, Any]) -> None:
    for path, method, op in operations(document):
        responses = op["responses"]
        errors = {code for code in responses if int(code) >= 400}
        for code in errors:
            assert responses[code]["content"]["application/json"]["schema"] == ERROR, (method, path, code)
        if path.startswith(("/v1/", "/admin/v1/")):
            assert {"401", "403", "422", "503"} <= errors, (method, path)
        if "requestBody" in op:
            assert {"400", "413", "415", "422"} <= errors, (method, path)
        if "{" in path:
            assert "404" in errors, (method, path)
    assert "402" in document["paths"]["/v1/holds"]["post"]["responses"]
    for path in ("/v1/holds", "/admin/v1/accounts/{account_id}/deposits"):
        assert {"200", "201", "409"} <= set(document["paths"][path]["post"]["responses"]), path
    detail = document["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"type", "code", "message", "param"}
    assert {"required", "available", "currency", "reservation"} <= set(detail["properties"])


def test_usage_documents_every_priced_field_and_allows_others(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    usage = schemas["Usage"]
    nested = {
        "prompt_tokens_details": "PromptTokensDetails",
        "completion_tokens_details": "CompletionTokensDetails",
    }
    for path in WIRE_PATHS.values():
        head, _, leaf = path.partition(".")
        assert head in usage["properties"], path
        if leaf:
            assert leaf in schemas[nested[head]]["properties"], path
    assert "total_tokens" in usage["properties"]
    assert set(usage["required"]) == {"prompt_tokens", "completion_tokens"}
    for name in ("Usage", *nested.values()):
        assert schemas[name].get("additionalProperties", True) is not False, name
    check = validator(document, {"$ref": "#/components/schemas/Usage"})
    assert check.is_valid(
        {
            "prompt_tokens": 12000,
            "completion_tokens": 800,
            "total_tokens": 12800,
            "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 3000, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 300},
            "claude_cache_creation_5_m_tokens": 1000,
            "claude_cache_creation_1_h_tokens": 2000,
            "service_tier": "default",
        }
    )
    assert not check.is_valid({"prompt_tokens": -1, "completion_tokens": 0})
    assert not check.is_valid({"prompt_tokens": "12", "completion_tokens": 0})


def test_stored_documents_are_typed(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]

    def target(prop: dict[str, Any]) -> str:
        ref = prop.get("$ref") or next(o["$ref"] for o in prop["oneOf"] if "$ref" in o)
        return str(ref).rsplit("/", 1)[1]

    hold = schemas["Hold"]["properties"]
    assert (target(hold["usage"]), target(hold["reservation"]), target(hold["charge"])) == (
        "Usage",
        "Reservation",
        "Charge",
    )
    for name in ("UsageRequest", "InterruptRequest", "AdminSettleRequest", "QuoteRequest"):
        assert target(schemas[name]["properties"]["usage"]) == "Usage", name
    assert target(schemas["ChargeQuote"]["properties"]["charge"]) == "Charge"
    assert target(schemas["ReservationQuote"]["properties"]["reservation"]) == "Reservation"
    publish = document["paths"]["/admin/v1/price-versions"]["post"]["requestBody"]
    assert publish["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/PriceDocument"}
    assert set(schemas["Rates"]["properties"]) == set(CATEGORIES)
    assert schemas["PriceDocument"]["additionalProperties"] is False


def test_real_answers_match_the_document(
    client: TestClient[Any], document: dict[str, Any], make_account: Any, contract_version: str
) -> None:
    """A 402 with its extras, a hold with its charge, and a published document validate."""
    poor = make_account("0.01")
    r = reserve(client, poor, "gpt-6-luna", key=new_id("k"), price_version=contract_version)
    assert r.status_code == 402, r.text
    assert validator(document, ERROR).is_valid(r.json()), r.text
    assert r.json()["error"]["reservation"]["tier"] in ("standard", "long_context")

    rich = make_account("1000")
    r = reserve(
        client,
        rich,
        "claude-sonnet-4-6",
        key=new_id("k"),
        price_version=contract_version,
        max_output_tokens=1000,
    )
    assert r.status_code == 201, r.text
    usage = {
        "prompt_tokens": 12000,
        "completion_tokens": 800,
        "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 3000},
        "claude_cache_creation_5_m_tokens": 1000,
        "claude_cache_creation_1_h_tokens": 2000,
        "extra": {"kept": True},
    }
    settled = client.post(f"/v1/holds/{r.json()['id']}/settle", json={"usage": usage}, headers=auth(GATEWAY))
    assert settled.status_code == 200, settled.text
    hold = validator(document, {"$ref": "#/components/schemas/Hold"})
    assert hold.is_valid(settled.json()), settled.text
    assert settled.json()["usage"]["extra"] == {"kept": True}
    got = client.get(f"/admin/v1/price-versions/{contract_version}", headers=auth(VIEWER))
    assert validator(document, {"$ref": "#/components/schemas/PriceVersion"}).is_valid(got.json()), got.text


def test_the_document_declares_headers_patterns_and_closed_bodies(document: dict[str, Any]) -> None:
    """What a generated client (or schemathesis) needs to send only what the service accepts."""
    keyed = {
        ("/v1/holds", "post"),
        ("/admin/v1/accounts/{account_id}/deposits", "post"),
        ("/admin/v1/accounts/{account_id}/adjustments", "post"),
        ("/admin/v1/accounts/{account_id}/grants", "post"),
    }
    for path, method, op in operations(document):
        headers = {p["name"] for p in op.get("parameters", []) if p["in"] == "header"}
        assert ("Idempotency-Key" in headers) == ((path, method) in keyed), (path, method)
    schemas = document["components"]["schemas"]
    for name in ("ReserveBody", "UsageRequest", "DepositBody", "FreezeRequest", "AdminReleaseRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    assert "additionalProperties" not in schemas["Usage"]  # unpriced usage fields are kept as sent
    params = {
        p["name"]: p["schema"]
        for p in document["paths"]["/admin/v1/accounts/{account_id}/balance"]["get"]["parameters"]
    }
    as_of = re.compile(params["as_of"]["pattern"])
    assert as_of.search("2026-12-01T00:00:00Z") and as_of.search("2026-12-01")
    assert not as_of.search("0.5") and not as_of.search("1700000000")
    deposit = re.compile(schemas["DepositBody"]["properties"]["amount"]["pattern"])
    assert [bool(deposit.search(v)) for v in ("10.50", "0.000000000001", "0", "-1", "1e3", "01")] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    interrupt = document["paths"]["/v1/holds/{hold_id}/interrupt"]["post"]["requestBody"]
    assert interrupt["required"] is False
    assert interrupt["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/InterruptRequest"
    }
