"""Alembic environment: runs migrations over the URL `ledger.db.alembic_config` sets."""

from __future__ import annotations

from alembic import context
from sqlalchemy import pool

from ledger.db import make_sync_engine

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url, "sqlalchemy.url must be set by ledger.db.alembic_config"


def run_migrations_online() -> None:
    # Connected through ledger.database_url: every accepted URL form, multi-host included.
    engine = make_sync_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            # One migrator at a time, even when several replicas start together.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7243100001)")
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=url, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
