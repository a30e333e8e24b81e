"""The OpenAPI document at /schema/openapi.json and its docs page at /schema.

- `config()` is the app's `OpenAPIConfig`: the bearer security scheme, and the Swagger UI
  docs page loading its script and stylesheet from this service (`/schema/assets`, the
  files of the `swagger-ui-py` package), so the page works with no network.
- `finish(openapi)` completes what Litestar derives from the handlers:
  * the JSON objects the service keeps as documents (`usage`, `reservation`, `charge`,
    the price document) are typed from `ledger.openapi.shapes`, without changing the
    dict-typed Structs that Litestar decodes, so the strict readers stay the only judges
    of a request;
  * the price publish body (read raw, so that a key given twice is refused) is documented;
  * Litestar's own 400 body (`status_code`, `detail`) is dropped where it is not the
    service's answer: the service refuses parameters with a 422 in the one error shape;
  * a body Struct that forbids unknown fields says so (`additionalProperties: false`);
  * an optional body (interrupt) is an optional request body, not a required JSON null;
  * an operation whose body takes an optional `idempotency_key` also documents the
    `Idempotency-Key` header (`ledger.http.idempotency_key`: one of the two is required).

Invariant: every operation documents only the error shape (`ErrorBody`) for its refusals,
and every /v1 and /admin/v1 operation, and no other, carries the bearer requirement.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import msgspec
from litestar.enums import ParamType
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPI,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.router import Router
from litestar.static_files import create_static_files_router

from ledger.http.idempotency_key import HEADER as IDEMPOTENCY_HEADER
from ledger.openapi import shapes
from ledger.openapi.responses import CSV_MARK

ASSETS = "/schema/assets"
BEARER = "bearer"
SECURITY: list[dict[str, list[str]]] = [{BEARER: []}]

# (component, property) -> (shape, nullable): where Litestar sees `dict[str, Any]`.
TYPED_FIELDS: dict[tuple[str, str], tuple[type[msgspec.Struct], bool]] = {
    ("Hold", "usage"): (shapes.Usage, True),
    ("Hold", "reservation"): (shapes.Reservation, False),
    ("Hold", "charge"): (shapes.Charge, True),
    ("ChargeQuote", "charge"): (shapes.Charge, False),
    ("ReservationQuote", "reservation"): (shapes.Reservation, False),
    ("UsageRequest", "usage"): (shapes.Usage, False),
    ("InterruptRequest", "usage"): (shapes.Usage, True),
    ("AdminSettleRequest", "usage"): (shapes.Usage, True),
    ("QuoteRequest", "usage"): (shapes.Usage, True),
    ("ErrorDetail", "reservation"): (shapes.Reservation, True),
    ("PriceVersion", "document"): (shapes.PriceDocument, True),
    ("CreatePlan", "document"): (shapes.PlanDocument, False),
    ("PublishRevision", "document"): (shapes.PlanDocument, False),
    ("PlanRevision", "document"): (shapes.PlanDocument, False),
}
# (path, method) -> shape of a body the handler reads itself.
RAW_BODIES: dict[tuple[str, str], type[msgspec.Struct]] = {
    ("/admin/v1/price-versions", "post"): shapes.PriceDocument,
}


def _swagger_static() -> Path:
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package (the docs page's assets) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def assets_router() -> Router:
    """The docs page's script, stylesheet and icon, served by the service itself."""
    return create_static_files_router(
        path=ASSETS, directories=[_swagger_static()], include_in_schema=False, name="docs-assets"
    )


def config(*, title: str, version: str, description: str) -> OpenAPIConfig:
    swagger = SwaggerRenderPlugin(
        path="/swagger",
        js_url=f"{ASSETS}/swagger-ui-bundle.js",
        css_url=f"{ASSETS}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS}/favicon-32x32.png'>",
    )
    return OpenAPIConfig(
        title=title,
        version=version,
        description=description,
        path="/schema",
        # The first plugin also answers /schema itself.
        render_plugins=[swagger],
        components=Components(
            security_schemes={
                BEARER: SecurityScheme(
                    type="http",
                    scheme="bearer",
                    description="`Authorization: Bearer <token>`: a gateway token (LEDGER_GATEWAY_TOKENS) "
                    "for /v1, an admin token (LEDGER_ADMIN_TOKENS, role viewer, finance or admin) "
                    "for /admin/v1",
                )
            }
        ),
    )


def _spec(node: dict[str, Any]) -> Schema | Reference:
    """A JSON Schema (2020-12, as msgspec writes it) as Litestar's OpenAPI 3.1 objects."""
    if "$ref" in node:
        return Reference(ref=node["$ref"])
    fields: dict[str, Any] = {}
    for key, value in node.items():
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
        if key == "properties":
            value = {prop: _spec(sub) for prop, sub in value.items()}
        elif key in ("anyOf", "oneOf", "allOf"):
            value = [_spec(sub) for sub in value]
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            value = _spec(value)
        elif key == "type":
            value = OpenAPIType(value)
        fields[name] = value
    return Schema(**fields)


def _ref(shape: type[msgspec.Struct], nullable: bool) -> Schema | Reference:
    ref = Reference(ref=f"#/components/schemas/{shape.__name__}")
    return Schema(one_of=[ref, Schema(type=OpenAPIType.NULL)]) if nullable else ref


def _is_litestar_400(response: Any) -> bool:
    content = getattr(response, "content", None) or {}
    schema = next((media.schema for media in content.values()), None)
    return isinstance(schema, Schema) and "status_code" in (schema.properties or {})


def _structs(kind: type[msgspec.Struct]) -> list[type[msgspec.Struct]]:
    found = []
    for sub in kind.__subclasses__():
        found.append(sub)
        found.extend(_structs(sub))
    return found


def strict_components() -> set[str]:
    """Names of the service's Structs that refuse unknown fields (and of none that accept them)."""
    strict: set[str] = set()
    lax: set[str] = set()
    for struct in _structs(msgspec.Struct):
        if struct.__module__.startswith("ledger."):
            config = struct.__struct_config__
            (strict if config.forbid_unknown_fields else lax).add(struct.__name__)
    return strict - lax


def _idempotency_header() -> Parameter:
    return Parameter(
        name=IDEMPOTENCY_HEADER,
        param_in=ParamType.HEADER,
        required=False,
        schema=Schema(type=OpenAPIType.STRING, min_length=1, max_length=255),
        description="the idempotency key, instead of (or equal to) the body's `idempotency_key`: "
        "one of the two is required; both given and different is 422",
    )


def _body(operation: Any, schemas: dict[str, Schema]) -> None:
    """An optional body as an optional request body; the idempotency key's header where it applies."""
    body = operation.request_body
    if not isinstance(body, RequestBody):
        return
    media = body.content.get("application/json")
    schema = media.schema if media is not None else None
    if isinstance(schema, Schema) and schema.one_of and len(schema.one_of) == 2:
        kinds = [s for s in schema.one_of if isinstance(s, Reference)]
        if len(kinds) == 1 and any(getattr(s, "type", None) == OpenAPIType.NULL for s in schema.one_of):
            media.schema = schema = kinds[0]  # type: ignore[union-attr]
            body.required = False
    component = schemas.get(schema.ref.rsplit("/", 1)[-1]) if isinstance(schema, Reference) else None
    key = "idempotency_key"
    if (
        component is not None
        and key in (component.properties or {})
        and key not in (component.required or [])
    ):
        operation.parameters = [*(operation.parameters or []), _idempotency_header()]


def finish(openapi: OpenAPI) -> OpenAPI:
    """Complete the generated document in place (see the module docstring); returns it."""
    components = openapi.components
    schemas = components.schemas if components.schemas is not None else {}
    _, generated = msgspec.json.schema_components(
        shapes.DOCUMENTED, ref_template="#/components/schemas/{name}"
    )
    for name, node in generated.items():
        if name in schemas:
            raise RuntimeError(f"OpenAPI component {name} is defined twice")
        schema = _spec(node)
        assert isinstance(schema, Schema), name  # a top-level definition is never a bare $ref
        schemas[name] = schema
    for (component, prop), (shape, nullable) in TYPED_FIELDS.items():
        owner = schemas[component]
        if owner.properties is None or prop not in owner.properties:
            raise RuntimeError(f"OpenAPI component {component} has no property {prop}")
        owner.properties[prop] = _ref(shape, nullable)
    for name in strict_components() & schemas.keys():
        if schemas[name].properties is not None:
            schemas[name].additional_properties = False
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "post", "put", "patch", "delete"):
            operation = getattr(item, method, None)
            if operation is None:
                continue
            _body(operation, schemas)
            if (path, method) in RAW_BODIES:
                operation.request_body = RequestBody(
                    content={
                        "application/json": OpenAPIMediaType(schema=_ref(RAW_BODIES[path, method], False))
                    },
                    required=True,
                )
            responses = operation.responses or {}
            if "400" in responses and _is_litestar_400(responses["400"]):
                del responses["400"]
            ok = responses.get("200")
            if isinstance(ok, OpenAPIResponse) and ok.description.endswith(CSV_MARK) and ok.content:
                # `?format=csv` or `Accept: text/csv`: the same answer as CSV text.
                ok.description = ok.description[: -len(CSV_MARK)]
                ok.content["text/csv"] = OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING))
    return openapi
