"""Database access: the async engine, one-transaction helpers, migrations, error translation.

Every service runs its work inside `transaction(...)`: one database transaction,
committed explicitly before the response is built. Deadlocks and serialization
failures are retried a few times (they are transient by definition); a database
that cannot be reached becomes `DatabaseUnavailable` (503), never a stack trace.

A replicated database (pg_auto_failover, a multi-host URL) is found again after a
failover by the connections themselves: each new connection goes to the host list in
`ledger.database_url` (`target_session_attrs` picks the primary), the pool tests a
connection before lending it (`pool_pre_ping`), and a connection that turns out to be on
a standby (SQLSTATE 25006, `read_only_sql_transaction`) counts as a lost one: it is
thrown away and the request is 503 `database_unavailable`, like any other outage.
"""

from __future__ import annotations

import asyncio
import weakref
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
from sqlalchemy import create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine, ExceptionContext
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ledger.database_url import DatabaseURL
from ledger.errors import DatabaseUnavailable, LedgerError

log = structlog.get_logger(__name__)

T = TypeVar("T")

RETRYABLE_SQLSTATES = {"40001", "40P01"}  # serialization_failure, deadlock_detected
# A write on a standby (a connection made before a failover, or a URL without
# target_session_attrs=read-write): that connection will never write again.
STANDBY_SQLSTATES = {"25006"}  # read_only_sql_transaction
# A unique violation on an idempotency key means a concurrent request with the same
# key committed first. Under READ COMMITTED a statement that waited for the account
# lock re-checks only the locked row, so its own idempotency lookup can be stale: the
# retry (a fresh statement) finds the committed record and answers a replay or a 409.
RETRYABLE_CONSTRAINTS = {"holds_account_key", "idempotency_keys_pkey"}
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


CONNECT_TIMEOUT = 5
APPLICATION_NAME = "ledger"
_conninfo: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()


def connection_string(url: str, *, application_name: str = APPLICATION_NAME) -> str:
    """The libpq conninfo every connection to `url` is made with: the URL's parameters, plus a
    connect timeout and an application name unless the URL gives its own."""
    target = DatabaseURL.parse(url)
    given = dict(target.params)
    extra: dict[str, str | int] = {}
    if "connect_timeout" not in given:
        extra["connect_timeout"] = CONNECT_TIMEOUT
    if "application_name" not in given:
        extra["application_name"] = application_name
    return target.conninfo(**extra)


def _bind(engine: Engine, info: str) -> None:
    """Every connection of `engine` is made with `info`; a standby's refusal to write throws it away."""
    _conninfo[engine] = info

    @event.listens_for(engine, "do_connect")
    def connect(dialect: Any, record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        cargs[:] = [info]  # the dialect's URL names no host: the conninfo is the whole target

    @event.listens_for(engine, "handle_error")
    def standby(context: ExceptionContext) -> None:
        if sqlstate(context.original_exception) in STANDBY_SQLSTATES:
            context.is_disconnect = True  # invalidated: the pool reconnects, to the primary


def make_engine(
    url: str, *, pool_size: int = 20, max_overflow: int = 10, application_name: str = APPLICATION_NAME
) -> AsyncEngine:
    """An async engine for `url` in any accepted form (`ledger.database_url`), multi-host included."""
    info = connection_string(url, application_name=application_name)
    engine = create_async_engine(
        "postgresql+psycopg://",
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,  # a connection broken by a failover is replaced before it is lent
        pool_recycle=1800,
    )
    _bind(engine.sync_engine, info)
    return engine


def make_sync_engine(url: str, **options: Any) -> Engine:
    """A synchronous engine for `url` (the migrations), connected like `make_engine`'s."""
    info = connection_string(url, application_name=f"{APPLICATION_NAME}-migrate")
    engine = create_engine("postgresql+psycopg://", **options)
    _bind(engine, info)
    return engine


def engine_conninfo(engine: AsyncEngine) -> str:
    """The conninfo `engine`'s connections are made with (for raw psycopg connections to the same
    database, the group-commit lanes); an engine not made here is read from its URL."""
    info = _conninfo.get(engine.sync_engine)
    if info is None:
        info = connection_string(engine.url.render_as_string(hide_password=False))
    return info


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
    """The database cannot serve this connection: gone, shutting down, or a standby (503)."""
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    if sqlstate(error) in STANDBY_SQLSTATES:
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
