"""The `ledger` command: serve, migrate, grant-service-role, worker, scheduler, health, reconcile,
expire-grants, prices.

Every command reads the same LEDGER_* settings. Without LEDGER_DATABASE_URL each
uses the embedded PostgreSQL in LEDGER_DATA_DIR, so `ledger reconcile` works
against the database `ledger serve` (embedded) is using.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ledger.settings import Settings, SettingsError, load_settings


def database_url(settings: Settings) -> str:
    if settings.database_url is not None:
        return settings.database_url
    from ledger.embedded import embedded_database_url

    return embedded_database_url(settings)


def migration_url(settings: Settings) -> str:
    """The schema owner's URL: LEDGER_MIGRATION_DATABASE_URL, else the service's own."""
    return settings.migration_database_url or database_url(settings)


def prepare(settings: Settings) -> str:
    """Resolve the database and bring its schema to head (a no-op, needing no DDL right, at head)."""
    from ledger.db import migrate

    url = database_url(settings)
    migrate(url)
    return url


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Upgrade as the schema owner; then grant LEDGER_SERVICE_ROLE the service's privileges, if set."""
    from ledger.db import head_revision, migrate
    from ledger.roles import RoleError, grant_service_role

    url = migration_url(settings)
    migrate(url)
    result: dict[str, Any] = {"migrated": True, "revision": head_revision()}
    if settings.service_role:
        try:
            result["granted"] = grant_service_role(url, settings.service_role)["role"]
        except RoleError as error:
            print(f"ledger migrate: {error}", file=sys.stderr)
            return 2
    print(json.dumps(result))
    return 0


def cmd_grant_service_role(settings: Settings, args: argparse.Namespace) -> int:
    """Grant ROLE exactly the service's privileges (idempotent; re-run after each migration)."""
    from ledger.roles import RoleError, grant_service_role

    try:
        result = grant_service_role(migration_url(settings), args.role)
    except RoleError as error:
        print(f"ledger grant-service-role: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    import os
    import shutil
    import tempfile

    from ledger.identity import serve_refusal

    refusal = serve_refusal(settings)
    if refusal is not None:
        print(f"ledger serve: {refusal}", file=sys.stderr)
        return 2
    workers = args.workers or settings.web_workers
    metrics_dir: str | None = None
    if workers > 1 and not settings.embedded:
        # Multiprocess metrics: a fresh folder per start, set before any serving process
        # imports prometheus_client (the workers are spawned, so they inherit it).
        metrics_dir = tempfile.mkdtemp(prefix="ledger-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    else:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)  # one process: its own registry
    try:
        return _serve(settings, args, workers)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _serve(settings: Settings, args: argparse.Namespace, workers: int) -> int:
    import uvicorn

    from ledger.http.server import LedgerHttpProtocol
    from ledger.logging import configure_logging

    configure_logging(settings.log_format, settings.log_level)
    url = prepare(settings)
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    print(f"ledger: serving on http://{shown}:{port}  (API docs: http://{shown}:{port}/schema)", flush=True)
    if settings.embedded:
        print(f"ledger: embedded PostgreSQL, data in {settings.data_dir.resolve()}", flush=True)
    if settings.dev_tokens:
        print(
            "ledger: DEV TOKENS in force (set LEDGER_GATEWAY_TOKENS / LEDGER_ADMIN_TOKENS to replace them):",
            flush=True,
        )
        for gateway in settings.gateway_tokens:
            print(f"  gateway: Authorization: Bearer {gateway.token}", flush=True)
        for admin in settings.admin_tokens:
            print(f"  admin ({admin.role}): Authorization: Bearer {admin.token}", flush=True)
    elif not settings.gateway_tokens and not settings.admin_tokens:
        print(
            "ledger: no tokens configured: every /v1 and /admin/v1 call will be refused with 401",
            file=sys.stderr,
            flush=True,
        )
    if workers > 1:
        if settings.embedded:
            print(
                "ledger: --workers > 1 needs LEDGER_DATABASE_URL (embedded mode runs one process)",
                file=sys.stderr,
            )
            return 2
        uvicorn.run(
            "ledger.asgi:create",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            log_level="warning",
            log_config=None,  # uvicorn's lines go through ledger.logging's formatter
            access_log=False,
            http=LedgerHttpProtocol,
            # The client address is the socket peer: only LEDGER_TRUSTED_PROXIES may name
            # another (ledger.http.throttle), never uvicorn's own X-Forwarded-For handling.
            proxy_headers=False,
            timeout_graceful_shutdown=settings.shutdown_grace_seconds,
        )
        return 0
    # One process: the app is built here (with several, each worker builds its own and the
    # supervisor never imports the metrics, so it writes no metric files of its own).
    from ledger.app import create_app
    from ledger.bootstrap import startup_hooks

    on_startup, on_shutdown = startup_hooks(settings, url)
    app = create_app(settings, url, on_startup=on_startup, on_shutdown=on_shutdown)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        log_config=None,  # uvicorn's lines go through ledger.logging's formatter
        access_log=False,
        http=LedgerHttpProtocol,
        proxy_headers=False,  # the client is the socket peer unless LEDGER_TRUSTED_PROXIES says otherwise
        # Without a bound uvicorn waits for every open request on SIGTERM, so one slow
        # client kept the service up indefinitely.
        timeout_graceful_shutdown=settings.shutdown_grace_seconds,
    )
    return 0


def cmd_stop_embedded(settings: Settings, args: argparse.Namespace) -> int:
    from ledger.embedded import stop_embedded

    if not settings.embedded:
        print("ledger: LEDGER_DATABASE_URL is set; there is no embedded PostgreSQL to stop", file=sys.stderr)
        return 2
    print(stop_embedded(settings))
    return 0


def cmd_prices(settings: Settings, args: argparse.Namespace) -> int:
    from ledger.prices import commands

    return commands.run(settings, prepare(settings), args)


def cmd_reconcile(settings: Settings, args: argparse.Namespace) -> int:
    """One reconciliation pass now; prints the run's JSON summary (exit 1 if the run failed)."""
    import asyncio

    from ledger.context import CLI
    from ledger.db import make_engine
    from ledger.holds.service import HoldService
    from ledger.logging import configure_logging
    from ledger.prices.service import PriceService
    from ledger.reconciliation.service import ReconciliationService

    configure_logging(settings.log_format, settings.log_level)
    url = prepare(settings)

    async def run() -> dict[str, Any]:
        engine = make_engine(url, pool_size=2, max_overflow=0)
        try:
            holds = HoldService(engine, PriceService(engine), settings)
            return await ReconciliationService(engine, holds, settings).run_once("cli", CLI)
        finally:
            await engine.dispose()

    summary = asyncio.run(run())
    print(json.dumps(summary, indent=2))
    return 0 if summary["status"] == "succeeded" else 1


def cmd_expire_grants(settings: Settings, args: argparse.Namespace) -> int:
    """One grant expiry pass now; prints its JSON summary (expired, skipped, amounts per currency)."""
    import asyncio

    from ledger.context import CLI
    from ledger.db import make_engine
    from ledger.grants.service import GrantService
    from ledger.logging import configure_logging

    configure_logging(settings.log_format, settings.log_level)
    url = prepare(settings)

    async def run() -> dict[str, Any]:
        engine = make_engine(url, pool_size=2, max_overflow=0)
        try:
            return await GrantService(engine).expire_once(CLI)
        finally:
            await engine.dispose()

    print(json.dumps(asyncio.run(run()), indent=2))
    return 0


def _require_services(settings: Settings, command: str) -> str | None:
    missing = [
        name
        for name, value in (
            ("LEDGER_DATABASE_URL", settings.database_url),
            ("LEDGER_REDIS_URL", settings.redis_url),
        )
        if not value
    ]
    if missing:
        return (
            f"ledger {command}: {' and '.join(missing)} must be set (the worker and scheduler run only "
            "against a configured database and Redis; `ledger serve` without LEDGER_DATABASE_URL "
            "runs the jobs in-process)"
        )
    return None


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    """Run Dramatiq worker processes for workers.actors against LEDGER_REDIS_URL."""
    problem = _require_services(settings, "worker")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    from dramatiq import cli as dramatiq_cli

    from ledger.logging import configure_logging
    from workers.broker import QUEUE

    # Dramatiq's own lines (this process's and its workers') through the ledger's formatter:
    # configured here, and `--skip-logging` keeps Dramatiq from adding its bracketed format.
    configure_logging(settings.log_format, settings.log_level)
    argv = [
        "workers.process:boot",
        "--skip-logging",
        "--processes",
        str(args.processes),
        "--threads",
        str(args.threads),
        "--queues",
        QUEUE,
    ]
    parsed = dramatiq_cli.make_argument_parser().parse_args(argv)  # type: ignore[no-untyped-call]
    result: Any = dramatiq_cli.main(parsed)  # type: ignore[no-untyped-call]
    return int(result or 0)


def cmd_scheduler(settings: Settings, args: argparse.Namespace) -> int:
    """Run the leader-elected schedule until SIGTERM/SIGINT."""
    problem = _require_services(settings, "scheduler")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    import signal

    from ledger.logging import configure_logging
    from workers.actors import JobContext, register_actors
    from workers.broker import setup_broker
    from workers.scheduler import LeaderScheduler, enqueuer

    configure_logging(settings.log_format, settings.log_level)
    assert settings.database_url is not None
    broker = setup_broker(settings)
    actors = register_actors(broker, JobContext(settings, settings.database_url, trigger="schedule"))
    scheduler = LeaderScheduler(settings, settings.database_url, enqueuer(actors))

    def stop(signum: int, frame: Any) -> None:
        scheduler.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    scheduler.run()
    return 0


def cmd_health(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 when Redis and the database answer (compose health checks of worker and scheduler)."""
    from workers.health import report

    result = report(settings, "scheduler" if args.scheduler else "worker")
    print(json.dumps(result))
    return 0 if result["ok"] else 1


def build_parser() -> argparse.ArgumentParser:
    from ledger.prices import commands as price_commands

    parser = argparse.ArgumentParser(prog="ledger", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the HTTP service")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument(
        "--workers", type=int, default=None, help="serving processes (default LEDGER_WEB_WORKERS, 1)"
    )
    serve.set_defaults(func=cmd_serve)
    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(func=cmd_migrate)
    grant = sub.add_parser(
        "grant-service-role",
        help="grant a role the service's least privileges (run as the schema owner, after migrate)",
    )
    grant.add_argument("role", help="an existing, non-superuser login role")
    grant.set_defaults(func=cmd_grant_service_role)
    stop = sub.add_parser("stop-embedded", help="stop the embedded PostgreSQL of LEDGER_DATA_DIR")
    stop.set_defaults(func=cmd_stop_embedded)
    price_commands.add_parser(sub)
    sub.choices["prices"].set_defaults(func=cmd_prices)
    reconcile = sub.add_parser("reconcile", help="resolve orphaned holds now; print the run's JSON summary")
    reconcile.set_defaults(func=cmd_reconcile)
    expire = sub.add_parser(
        "expire-grants", help="post out expired grants' remainders now; print a JSON summary"
    )
    expire.set_defaults(func=cmd_expire_grants)
    worker = sub.add_parser("worker", help="run Dramatiq worker processes (needs LEDGER_REDIS_URL)")
    worker.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    worker.add_argument("--threads", type=int, default=4, help="threads per process (default 4)")
    worker.set_defaults(func=cmd_worker)
    scheduler = sub.add_parser("scheduler", help="run the periodic schedule (one leader at a time)")
    scheduler.set_defaults(func=cmd_scheduler)
    health = sub.add_parser("health", help="exit 0 if Redis and the database answer")
    role = health.add_mutually_exclusive_group(required=True)
    role.add_argument("--worker", action="store_true", help="check what a worker needs")
    role.add_argument("--scheduler", action="store_true", help="check what the scheduler needs")
    health.set_defaults(func=cmd_health)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"ledger: {error}", file=sys.stderr)
        return 2
    result: Any = args.func(settings, args)
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
