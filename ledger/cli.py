"""The `ledger` command: serve, migrate, worker, scheduler, reconcile, prices.

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


def prepare(settings: Settings) -> str:
    """Resolve the database and bring its schema to head."""
    from ledger.db import migrate

    url = database_url(settings)
    migrate(url)
    return url


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    prepare(settings)
    from ledger.db import head_revision

    print(json.dumps({"migrated": True, "revision": head_revision()}))
    return 0


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from ledger.app import create_app
    from ledger.bootstrap import startup_hooks
    from ledger.logging import configure_logging

    configure_logging(settings.log_format, settings.log_level)
    url = prepare(settings)
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    on_startup, on_shutdown = startup_hooks(settings, url)
    app = create_app(settings, url, on_startup=on_startup, on_shutdown=on_shutdown)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    print(f"ledger: serving on http://{shown}:{port}  (API docs: http://{shown}:{port}/schema)", flush=True)
    if settings.embedded:
        print(f"ledger: embedded PostgreSQL, data in {settings.data_dir.resolve()}", flush=True)
    if settings.dev_tokens:
        print("ledger: DEV TOKENS in force (set LEDGER_GATEWAY_TOKENS / LEDGER_ADMIN_TOKENS to replace them):",
              flush=True)
        for token in settings.gateway_tokens:
            print(f"  gateway: Authorization: Bearer {token}", flush=True)
        for token, role in settings.admin_tokens:
            print(f"  admin ({role}): Authorization: Bearer {token}", flush=True)
    elif not settings.gateway_tokens and not settings.admin_tokens:
        print("ledger: no tokens configured: every /v1 and /admin/v1 call will be refused with 401",
              file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, loop="asyncio")
    return 0


def cmd_prices(settings: Settings, args: argparse.Namespace) -> int:
    from ledger.prices import commands

    return commands.run(settings, prepare(settings), args)


def build_parser() -> argparse.ArgumentParser:
    from ledger.prices import commands as price_commands

    parser = argparse.ArgumentParser(prog="ledger", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the HTTP service")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.set_defaults(func=cmd_serve)
    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(func=cmd_migrate)
    price_commands.add_parser(sub)
    sub.choices["prices"].set_defaults(func=cmd_prices)
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
