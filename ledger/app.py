"""The Litestar application factory.

`create_app(settings, database_url)` wires the engine (and, with
LEDGER_READ_DATABASE_URL, a second one for the admin surface's lists and histories),
the replication watch (`ledger.replication`), services, auth registry, error handling,
request context and OpenAPI, and (only with OTEL_EXPORTER_OTLP_ENDPOINT set) tracing
(`ledger.tracing`). Background jobs are not started
here: `ledger.cli serve` decides whether they run in-process (embedded mode).
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar

from ledger import __version__, console, tracing
from ledger.accounts.controller import AdminAccountController, GatewayAccountController
from ledger.accounts.service import AccountService
from ledger.alerts.controller import AdminAlertController
from ledger.alerts.service import AlertService
from ledger.budgets.controller import AdminBudgetController
from ledger.budgets.service import BudgetService
from ledger.console.headers import console_headers
from ledger.db import make_engine
from ledger.errors import TooManyRequests
from ledger.grants.controller import AdminGrantController
from ledger.grants.service import GrantService
from ledger.holds.controller import AdminHoldController, GatewayHoldController
from ledger.holds.fastlane import FastLane
from ledger.holds.lookup import AdminHoldLookupController, GatewayHoldLookupController
from ledger.holds.service import HoldService
from ledger.http.admission import admit
from ledger.http.auth import TokenRegistry
from ledger.http.errors import handle_exception
from ledger.http.methods import ALLOWED, allowed_methods, options_middleware
from ledger.http.middleware import request_context_middleware
from ledger.http.throttle import AuthThrottle, throttled_response
from ledger.openapi import assets_router, finish
from ledger.openapi import config as openapi_config
from ledger.ops.controller import AdminOpsController, HealthController
from ledger.plans.controller import AdminPlanController
from ledger.plans.service import PlanService
from ledger.prices.controller import AdminPriceController, GatewayQuoteController
from ledger.prices.service import PriceService
from ledger.reconciliation.controller import AdminReconciliationController
from ledger.reconciliation.service import ReconciliationService
from ledger.replication import ReplicationWatch
from ledger.reports.controller import AdminReportController
from ledger.reports.service import ReportService
from ledger.settings import Settings

CONTROLLERS: list[Any] = [
    HealthController,
    AdminOpsController,
    AdminAccountController,
    GatewayAccountController,
    AdminBudgetController,
    AdminGrantController,
    AdminPriceController,
    AdminPlanController,
    GatewayQuoteController,
    GatewayHoldController,
    AdminHoldController,
    GatewayHoldLookupController,
    AdminHoldLookupController,
    AdminReconciliationController,
    AdminReportController,
    AdminAlertController,
    *console.CONTROLLERS,
]


def settle_heap() -> None:
    """Keep the objects made at start out of every garbage collection from now on.

    The routes, schemas, OpenAPI document, templates and pools made at start live as long
    as the process, yet each full collection would walk them all with the event loop
    stopped, a pause every in-flight request waits through. After one collection of
    start-up garbage, `gc.freeze()` moves the survivors to the permanent generation, so a
    collection only walks what requests have made since.
    """
    gc.collect()
    gc.freeze()


def create_app(
    settings: Settings,
    database_url: str,
    *,
    on_startup: Sequence[Callable[[Litestar], Any]] = (),
    on_shutdown: Sequence[Callable[[Litestar], Any]] = (),
) -> Litestar:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        engine = make_engine(
            database_url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow
        )
        reads = engine
        if settings.read_database_url is not None:
            reads = make_engine(
                settings.read_database_url,
                pool_size=settings.db_pool_size,
                max_overflow=settings.db_max_overflow,
                application_name="ledger-reads",
            )
        app.state.engine = engine
        app.state.reads = reads
        app.state.settings = settings
        app.state.tokens = TokenRegistry(settings)
        app.state.auth_throttle = AuthThrottle.from_settings(settings)
        app.state.accounts = AccountService(engine, reads=reads)
        app.state.budgets = BudgetService(engine, reads=reads)
        app.state.plans = PlanService(engine)
        app.state.grants = GrantService(engine, reads=reads)
        app.state.prices = PriceService(engine)
        app.state.holds = HoldService(engine, app.state.prices, settings, reads=reads)
        app.state.reconciliation = ReconciliationService(engine, app.state.holds, settings)
        app.state.reports = ReportService(reads)
        app.state.alerts = AlertService(engine, settings)
        app.state.replication = ReplicationWatch(engine, required=settings.require_sync_standby)
        await app.state.replication.start()
        settle_heap()
        try:
            yield
        finally:
            await app.state.replication.stop()
            await app.state.holds.close()
            await engine.dispose()
            if reads is not engine:
                await reads.dispose()
            tracing.stop()

    app = Litestar(
        route_handlers=[*CONTROLLERS, assets_router()],
        lifespan=[lifespan],
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
        exception_handlers={Exception: handle_exception, TooManyRequests: throttled_response},
        # Every handler gets the admission checks (query keys, NUL, content type, JSON
        # screening); no layer below the app may set its own before_request hook.
        before_request=admit,
        request_max_body_size=settings.max_body_bytes,
        middleware=[request_context_middleware, options_middleware],
        openapi_config=openapi_config(
            title="ledger",
            version=__version__,
            description="Billing and wallet ledger behind the LLM API gateway. Amounts are decimal strings; "
            "the API and billing rules are described in docs/api.md.",
        ),
        template_config=console.template_config(),
        plugins=tracing.plugins(settings),  # none unless OTEL_EXPORTER_OTLP_ENDPOINT is set
        debug=False,
    )
    app.state[ALLOWED] = allowed_methods(app)
    if settings.fast_lane and not tracing.enabled(settings):
        # The gateway's reserve, settle and release, ahead of the router (ledger.holds.fastlane);
        # with tracing on they go through the router, so that the plugin traces them too.
        app.asgi_handler = FastLane(app, app.asgi_handler)
    # Outside the router, so that its own 404 and 405 under /console carry the headers too.
    app.asgi_handler = console_headers(app.asgi_handler)
    # Built once here (not on the first /schema request) so that a shape that no longer
    # matches the handlers fails at start, and the document is served already complete.
    finish(app.openapi_schema)
    return app
