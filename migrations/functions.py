"""SQL functions of the migrations: where their bodies live, and how a downgrade restores them.

From 0023 on, a function's SQL lives in `migrations/sql/<function>.sql` (a complete
`CREATE OR REPLACE FUNCTION ... $$;` statement). A migration installs it with
`install(op, name, revision=...)`, which also records (name, revision, sha256, body) in
the table `sql_functions`; its downgrade calls `uninstall(op, revision=...)`, which
deletes those rows and restores each function's previous body: the one recorded by an
earlier revision, else the definition of the landed migration that last wrote it
(`defined_by`), else none (the function is dropped).

The landed migrations 0001-0022 keep their SQL inline:

A migration that replaces a database function must restore the previous definition on
downgrade. Rather than a copy of that definition, the downgrade reads it from the
migration that wrote it: `defined_by("0013_credit_grants.py", "ledger_entry_post")` is
the `CREATE [OR REPLACE] FUNCTION ledger_entry_post(...) ... END $$;` statement of that
file's UPGRADE, as CREATE OR REPLACE. A missing definition fails the downgrade loudly.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from sqlalchemy import text

VERSIONS = Path(__file__).parent / "versions"


def defined_by(migration: str, *names: str) -> str:
    text = (VERSIONS / migration).read_text()
    upgrade = text.split('UPGRADE = r"""', 1)[1].split('"""', 1)[0]
    definitions = []
    for name in names:
        found = re.search(rf"CREATE (?:OR REPLACE )?FUNCTION {name}\(.*?\nEND \$\$;\n", upgrade, re.S)
        if found is None:
            raise RuntimeError(f"{migration} does not define {name}: cannot restore it")
        statement = found.group(0)
        if not statement.startswith("CREATE OR REPLACE"):
            statement = statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        definitions.append(statement)
    return "".join(definitions)


# --- functions whose SQL lives in migrations/sql/ (from 0023 on) ------------------------

SQL = Path(__file__).parent / "sql"

REGISTRY = """
CREATE TABLE IF NOT EXISTS sql_functions (
  name         text NOT NULL,
  revision     text NOT NULL,
  sha256       text NOT NULL,
  body         text NOT NULL,
  installed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (name, revision)
)
"""


def source(name: str) -> str:
    """The `CREATE OR REPLACE FUNCTION name(...) ... $$;` statement of migrations/sql/<name>.sql."""
    return (SQL / f"{name}.sql").read_text()


def sha256(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def install(op: Any, name: str, *, revision: str) -> None:
    """Create (or replace) function `name` from its file and record it as `revision` installed it.

    The statement is sent to the driver as it is (no bind parameters are parsed in it)."""
    body = source(name)
    bind = op.get_bind()
    bind.exec_driver_sql(REGISTRY)
    _raw(bind, body)
    bind.execute(
        text(
            "INSERT INTO sql_functions (name, revision, sha256, body) "
            "VALUES (:name, :revision, :sha256, :body) "
            "ON CONFLICT (name, revision) DO UPDATE SET sha256 = EXCLUDED.sha256, body = EXCLUDED.body, "
            "installed_at = clock_timestamp()"
        ),
        {
            "name": name,
            "revision": revision,
            "sha256": hashlib.sha256(body.encode()).hexdigest(),
            "body": body,
        },
    )


def _raw(bind: Any, statement: str) -> None:
    """Run `statement` on the migration's connection (its transaction) with no parameters,
    so nothing in it (a `%` or a `:name` in PL/pgSQL) is taken for a placeholder."""
    with bind.connection.dbapi_connection.cursor() as cursor:
        cursor.execute(statement)


def uninstall(op: Any, *, revision: str, previous: dict[str, str] | None = None) -> None:
    """Undo every `install` of `revision`, last installed first.

    Each function gets back the body an earlier revision recorded for it in `sql_functions`;
    failing that, `previous[name]` (a statement, e.g. `defined_by(...)` of the landed
    migration that last defined it); failing that, it did not exist before: it is dropped."""
    bind = op.get_bind()
    rows = bind.execute(
        text(
            "SELECT name FROM sql_functions WHERE revision = :revision ORDER BY installed_at DESC, name DESC"
        ),
        {"revision": revision},
    ).all()
    for (name,) in rows:
        bind.execute(
            text("DELETE FROM sql_functions WHERE name = :name AND revision = :revision"),
            {"name": name, "revision": revision},
        )
        earlier = bind.execute(
            text("SELECT body FROM sql_functions WHERE name = :name ORDER BY installed_at DESC LIMIT 1"),
            {"name": name},
        ).scalar()
        if earlier is None and previous is not None:
            earlier = previous.get(name)
        if earlier is not None:
            _raw(bind, earlier)
            continue
        for (signature,) in bind.execute(
            text("SELECT CAST(CAST(oid AS regprocedure) AS text) FROM pg_proc WHERE proname = :name"),
            {"name": name},
        ).all():
            bind.exec_driver_sql(f"DROP FUNCTION {signature}")
    if bind.execute(text("SELECT count(*) FROM sql_functions")).scalar() == 0:
        bind.exec_driver_sql("DROP TABLE sql_functions")
