"""Opt-in OpenTelemetry tracing of the HTTP service: on only when OTEL_EXPORTER_OTLP_ENDPOINT is set.

With the endpoint set (`Settings.otel_endpoint`), `plugins(settings)` gives the app
Litestar's OpenTelemetry plugin (a server span per request, continuing the caller's W3C
`traceparent`), and `start()` instruments psycopg (a span per statement, under the
request's span) and exports every span over OTLP/HTTP to the endpoint, batched. The
standard OTEL_* variables (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_*, ...)
are read by the OpenTelemetry SDK itself.

Invariants:
- Without the endpoint nothing of OpenTelemetry is imported or installed: no plugin, no
  instrumented driver; the hot path pays nothing.
- The packages are the optional extra `ledger[otel]`; they are imported here lazily, and
  only when the endpoint is set. Set without them, the service refuses to start
  (`TracingUnavailable`) rather than run untraced while the operator believes otherwise.
- The fast lane (`ledger.holds.fastlane`) answers reserve, settle and release ahead of
  Litestar's routing, so outside the plugin's middleware: with tracing on, `create_app`
  leaves it off, and every request, those three included, is traced.
- One tracer provider per process (`start` is idempotent); `stop` flushes and shuts it
  down and removes the psycopg instrumentation.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import structlog

from ledger.settings import Settings, SettingsError

log = structlog.get_logger(__name__)

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
# Probes and scrapes every few seconds would drown the traces that matter.
UNTRACED_PATHS = ["/healthz", "/readyz", "/metrics"]

_lock = threading.Lock()
_provider: Any = None


class TracingUnavailable(SettingsError):
    """OTEL_EXPORTER_OTLP_ENDPOINT is set but the `otel` extra is not installed."""


def enabled(settings: Settings) -> bool:
    return settings.otel_endpoint is not None


def start() -> Any:
    """This process's tracer provider, created (with the OTLP exporter and psycopg's
    instrumentation) on the first call."""
    global _provider
    with _lock:
        if _provider is not None:
            return _provider
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as error:
            raise TracingUnavailable(
                f"{ENDPOINT_ENV} is set but OpenTelemetry is not installed: pip install 'ledger[otel]' "
                f"({error.name} is missing)"
            ) from None
        service = os.environ.get("OTEL_SERVICE_NAME") or "ledger"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
        _provider = provider
        log.info("tracing.started", endpoint=os.environ.get(ENDPOINT_ENV), service=service)
        return provider


def plugins(settings: Settings) -> list[Any]:
    """Litestar's OpenTelemetry plugin when tracing is on, else nothing."""
    if not enabled(settings):
        return []
    provider = start()
    from litestar.plugins.opentelemetry import OpenTelemetryConfig, OpenTelemetryPlugin

    return [OpenTelemetryPlugin(OpenTelemetryConfig(tracer_provider=provider, exclude=UNTRACED_PATHS))]


def stop() -> None:
    """Export what is buffered, shut the provider down, un-instrument psycopg."""
    global _provider
    with _lock:
        provider, _provider = _provider, None
    if provider is None:
        return
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    provider.force_flush()
    provider.shutdown()
    PsycopgInstrumentor().uninstrument()
