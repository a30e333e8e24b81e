"""structlog setup: JSON lines in production, key=value in a terminal.

Context (request_id, account_id, hold_id, actor, message_id) is bound through
contextvars so every line of one request or job carries it. Tokens are never
bound or logged: auth logs only a token's fingerprint.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "auto", level: str = "INFO") -> None:
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric_level = logging.getLevelName(level.upper())
    if not isinstance(numeric_level, int):
        numeric_level = logging.INFO
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric_level, logging.WARNING), stream=sys.stderr, format="%(message)s")
    for noisy in ("httpx", "uvicorn.access", "alembic", "apscheduler", "pgserver", "dramatiq"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
