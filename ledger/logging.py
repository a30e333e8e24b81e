"""structlog setup: one format per process, JSON lines in production, key=value in a terminal.

Context (request_id, account_id, hold_id, actor, message_id) is bound through
contextvars so every line of one request or job carries it. Tokens are never
bound or logged: auth logs only a token's fingerprint.

The standard library's records (Dramatiq's, APScheduler's, uvicorn's, psycopg's) go
through the same renderer (`structlog.stdlib.ProcessorFormatter` on the root logger's one
handler), with `logger` naming their source: a process never mixes Dramatiq's bracketed
lines into a JSON log. `configure_logging` replaces whatever handlers the root logger had
(a `logging.basicConfig` made before it, e.g. by Dramatiq's command line), so calling it
again (a forked worker process) leaves one handler.
"""

from __future__ import annotations

import logging
import sys

import structlog

# Libraries whose INFO lines are per request or per tick: WARNING and above only.
QUIET = ("httpx", "uvicorn.access", "alembic", "apscheduler", "pgserver")


def renderer(use_json: bool) -> structlog.types.Processor:
    if use_json:
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=False)


def configure_logging(fmt: str = "auto", level: str = "INFO") -> None:
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    numeric_level = logging.getLevelName(level.upper())
    if not isinstance(numeric_level, int):
        numeric_level = logging.INFO
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer(use_json)],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer(use_json),
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(numeric_level, logging.INFO))
    for name in QUIET:
        logging.getLogger(name).setLevel(max(numeric_level, logging.WARNING))
    # uvicorn's own loggers otherwise keep handlers and formats of their own.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "dramatiq"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
