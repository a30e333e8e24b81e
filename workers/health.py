"""`ledger health --worker|--scheduler`: do Redis and the database answer? (compose health checks)."""

from __future__ import annotations

from typing import Any

import psycopg
import redis

from ledger.database_url import conninfo
from ledger.settings import Settings

TIMEOUT_SECONDS = 5


def check_redis(url: str) -> str | None:
    """None when Redis answers PING, else why not."""
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=TIMEOUT_SECONDS, socket_timeout=TIMEOUT_SECONDS
        )
        try:
            client.ping()
        finally:
            client.close()
    except redis.RedisError as error:
        return f"{type(error).__name__}: {error}"
    return None


def check_database(url: str) -> str | None:
    """None when the database answers SELECT 1, else why not."""
    try:
        with psycopg.connect(conninfo(url), connect_timeout=TIMEOUT_SECONDS) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        return f"{type(error).__name__}: {error}"
    return None


def report(settings: Settings, role: str) -> dict[str, Any]:
    problems: dict[str, str] = {}
    if settings.database_url is None:
        problems["database"] = "LEDGER_DATABASE_URL is not set"
    elif (why := check_database(settings.database_url)) is not None:
        problems["database"] = why
    if settings.redis_url is None:
        problems["redis"] = "LEDGER_REDIS_URL is not set"
    elif (why := check_redis(settings.redis_url)) is not None:
        problems["redis"] = why
    return {"role": role, "ok": not problems, "problems": problems}
