"""`ledger prices publish|refresh|diff|list`: the price commands, over the same services as HTTP.

Exit codes: 0 done (including "unchanged" and every `--dry-run`), 2 refused input or an
unreadable source, 3 a refresh refused for a rate moving past the max factor, 4 a
refresh refused because a version was published by hand after the last refresh.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec

from ledger.context import CLI, Actor
from ledger.db import make_engine, read_only
from ledger.errors import LedgerError, ValidationFailed
from ledger.prices import repository as price_repository
from ledger.prices.schemas import PublishResult
from ledger.prices.service import PriceService
from ledger.prices.sources import SourceError, load_sources
from ledger.settings import Settings
from pricing.diff import compare_documents, diff_to_builtins
from pricing.errors import PriceDocumentInvalid


def _print(value: Any) -> None:
    print(json.dumps(msgspec.to_builtins(value), indent=2))


def _fail(message: str, code: int = 1) -> int:
    print(f"ledger prices: {message}", file=sys.stderr)
    return code


async def _with_service(url: str, work: Any) -> Any:
    engine = make_engine(url, pool_size=2, max_overflow=0)
    try:
        return await work(PriceService(engine))
    finally:
        await engine.dispose()


def refresh_factor(settings: Settings, override: str | None) -> Decimal:
    raw = override or settings.price_refresh_max_factor
    try:
        factor = Decimal(raw)
    except InvalidOperation as error:
        raise SystemExit(f"max factor must be a number, got {raw!r}") from error
    if not factor > 1:
        raise SystemExit("max factor must be greater than 1")
    return factor


EXIT_CODES = {"publish": 0, "unchanged": 0, "refuse_rate_move": 3, "refuse_newer_version": 4}


async def refresh(
    settings: Settings,
    url: str,
    *,
    force: bool,
    factor: Decimal,
    actor: Actor = CLI,
    dry_run: bool = False,
) -> PublishResult:
    doc = load_sources(settings.price_sources)
    result: PublishResult = await _with_service(
        url, lambda svc: svc.refresh(doc, actor, max_factor=factor, force=force, dry_run=dry_run)
    )
    return result


def run(settings: Settings, url: str, args: argparse.Namespace) -> int:
    try:
        if args.prices_command == "publish":
            raw = Path(args.file).read_bytes()
            if args.now:  # publish as of now: the document's own effective_at is dropped
                document = json.loads(raw)
                if isinstance(document, dict):
                    document.pop("effective_at", None)
                raw = json.dumps(document).encode()

            async def publish(svc: PriceService) -> tuple[Any, str | None]:
                published = await svc.publish_raw(raw, CLI, replace=args.replace)
                async with read_only(svc.engine) as conn:
                    active = await price_repository.active_version(
                        conn, published.currency, datetime.now(UTC)
                    )
                return published, active

            version, active = asyncio.run(_with_service(url, publish))
            _print(version)
            if not version.created:
                print(
                    f"ledger prices: note: nothing published: {version.version} already has this content",
                    file=sys.stderr,
                )
            if active != version.version:
                print(
                    f"ledger prices: note: {version.version} is not the active {version.currency} version "
                    f"now (active: {active}); its effective_at is {version.effective_at}, so it never "
                    "applies and cannot be pinned: publish it again with --now (or a later effective_at).",
                    file=sys.stderr,
                )
            return 0
        if args.prices_command == "refresh":
            result = asyncio.run(
                refresh(
                    settings,
                    url,
                    force=args.force,
                    factor=refresh_factor(settings, args.max_factor),
                    dry_run=args.dry_run,
                )
            )
            _print(result)
            if result.dry_run:
                return 0
            code = EXIT_CODES[result.outcome]
            if code:
                print(f"ledger prices: {result.reason}", file=sys.stderr)
            return code
        if args.prices_command == "diff":

            async def diff(svc: PriceService) -> Any:
                async with read_only(svc.engine) as conn:
                    old = await svc.document(conn, args.old)
                    new = await svc.document(conn, args.new)
                return diff_to_builtins(compare_documents(old, new))

            _print(asyncio.run(_with_service(url, diff)))
            return 0
        if args.prices_command == "list":
            versions, _ = asyncio.run(_with_service(url, lambda svc: svc.list(cursor=None, limit=500)))
            _print(versions)
            return 0
    except ValidationFailed as error:
        return _fail(f"refused: {error.param}: {error.message}", 2)
    except PriceDocumentInvalid as error:
        return _fail(f"refused: {error.param}: {error.message}", 2)
    except (SourceError, OSError) as error:
        return _fail(str(error), 2)
    except LedgerError as error:
        return _fail(f"{error.code}: {error.message}", 2)
    return _fail("unknown prices command", 2)


def add_parser(sub: Any) -> None:
    prices = sub.add_parser("prices", help="publish, refresh, diff and list price versions")
    verbs = prices.add_subparsers(dest="prices_command", required=True)
    publish = verbs.add_parser("publish", help="publish a price document file as a new version")
    publish.add_argument("file")
    publish.add_argument(
        "--replace", action="store_true", help="allow dropping models that the active version prices"
    )
    publish.add_argument(
        "--now", action="store_true", help="publish as of now, ignoring the document's effective_at"
    )
    refresh_p = verbs.add_parser(
        "refresh",
        help="re-read LEDGER_PRICE_SOURCES; publish only if they changed since the last refresh "
        "and nothing was published by hand since",
    )
    refresh_p.add_argument(
        "--force",
        action="store_true",
        help="publish even past the max factor or over a version published by hand (audit-logged)",
    )
    refresh_p.add_argument(
        "--dry-run", action="store_true", help="print the decision and the diff; publish nothing"
    )
    refresh_p.add_argument(
        "--max-factor", default=None, help="refuse rate moves above this factor (default 3)"
    )
    diff = verbs.add_parser("diff", help="what changed between two versions")
    diff.add_argument("old")
    diff.add_argument("new")
    verbs.add_parser("list", help="every price version, newest first")
