"""Database access: the async engine, one-transaction helpers, migrations, error translation.

Every service runs its work inside `transaction(...)`: one database transaction,
committed explicitly before the response is built. Deadlocks and serialization
failures are retried a few times (they are transient by definition); a database
that cannot be reached becomes `DatabaseUnavailable` (503), never a stack trace.
The pool tests each connection as it hands it out (`pool_pre_ping`), so a connection
that died in a database restart or failover is replaced, not given to a request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import structlog
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ledger.errors import DatabaseUnavailable, LedgerError

log = structlog.get_logger(__name__)

T = TypeVar("T")

RETRYABLE_SQLSTATES = {"40001", "40P01"}  # serialization_failure, deadlock_detected
# A unique violation on an idempotency key means a concurrent request with the same
# key committed first. Under READ COMMITTED a statement that waited for the account
# lock re-checks only the locked row, so its own idempotency lookup can be stale: the
# retry (a fresh statement) finds the committed record and answers a replay or a 409.
RETRYABLE_CONSTRAINTS = {"holds_account_key", "idempotency_keys_pkey"}
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def make_engine(url: str, *, pool_size: int = 20, max_overflow: int = 10) -> AsyncEngine:
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        pool_recycle=1800,
        connect_args={"connect_timeout": 5},
    )


def sqlstate(error: BaseException) -> str | None:
    orig = getattr(error, "orig", None)
    if isinstance(orig, psycopg.Error):
        return orig.sqlstate
    if isinstance(error, psycopg.Error):
        return error.sqlstate
    return None


def retryable(error: BaseException) -> bool:
    state = sqlstate(error)
    if state in RETRYABLE_SQLSTATES:
        return True
    if state == "23505":
        orig = getattr(error, "orig", None) or error  # SQLAlchemy wraps; raw psycopg does not
        diag = getattr(orig, "diag", None)
        return getattr(diag, "constraint_name", None) in RETRYABLE_CONSTRAINTS
    return False


def is_unreachable(error: BaseException) -> bool:
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    orig = getattr(error, "orig", error)
    if isinstance(orig, psycopg.OperationalError):
        state = orig.sqlstate
        return state is None or state.startswith("08") or state.startswith("57P")
    return isinstance(error, (OSError, sa_exc.TimeoutError, ConnectionError))


async def transaction(
    engine: AsyncEngine, work: Callable[[AsyncConnection], Awaitable[T]], *, attempts: int = 5
) -> T:
    """Run `work` in one database transaction and commit it; retry transient conflicts."""
    for attempt in range(1, attempts + 1):
        try:
            async with engine.connect() as conn:
                result = await work(conn)
                await conn.commit()
                return result
        except LedgerError:
            raise
        except (sa_exc.DBAPIError, OSError, sa_exc.TimeoutError) as error:
            if retryable(error) and attempt < attempts:
                log.info("db.retry", sqlstate=sqlstate(error), attempt=attempt)
                await asyncio.sleep(0.002 * attempt)
                continue
            if is_unreachable(error):
                raise DatabaseUnavailable("the database cannot be reached") from error
            raise
    raise AssertionError("unreachable")


@asynccontextmanager
async def read_only(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for reads; translates an unreachable database into 503."""
    try:
        async with engine.connect() as conn:
            yield conn
            await conn.rollback()
    except LedgerError:
        raise
    except (sa_exc.DBAPIError, OSError, sa_exc.TimeoutError) as error:
        if is_unreachable(error):
            raise DatabaseUnavailable("the database cannot be reached") from error
        raise


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def migrate(url: str) -> None:
    """Apply every migration up to head (synchronous; safe to run from several processes)."""
    command.upgrade(alembic_config(url), "head")


def head_revision() -> str | None:
    script = ScriptDirectory.from_config(alembic_config("postgresql+psycopg://unused/none"))
    return script.get_current_head()


async def current_revision(conn: AsyncConnection) -> str | None:
    def _current(sync_conn: Any) -> str | None:
        return MigrationContext.configure(sync_conn).get_current_revision()

    return await conn.run_sync(_current)
