"""SQL functions of the migrations: where their bodies live, and how a downgrade restores them.

From 0023 on, a function's SQL lives in `migrations/sql/<function>.sql`: one complete
`CREATE OR REPLACE FUNCTION ... $$;` statement, the body at head. A migration that
installs functions lists them with the sha256 of the text it installs,
`FUNCTIONS = {"ledger_hold_batch": "<sha256>", ...}` (in dependency order), and calls
`install_all(op, FUNCTIONS, revision=revision)`; each install also records (name,
revision, sha256, body) in the table `sql_functions` (the owner's alone: the service
role gets no privilege on it). Its downgrade calls `uninstall(op, revision=...)`, which
deletes those rows and restores each function's previous body: the one recorded by the
latest earlier revision (its hash checked), else the definition of the landed migration
that last wrote it (`defined_by`), else none (the function is dropped).

Changing a function, so that the change reads as a diff of one file:
1. copy `migrations/sql/<function>.sql` to `migrations/sql/<revision>/<function>.sql`,
   where <revision> is the migration that pinned the current text (the copy keeps what
   that migration installs on a fresh database);
2. edit `migrations/sql/<function>.sql`;
3. write a new migration whose `FUNCTIONS` pins the new text's sha256
   (`python -m migrations.functions <function>` prints it).
`install` uses the head file when its hash is the pinned one, else the copy kept for the
revision, and refuses anything else, so a migration always installs exactly the text it
pinned, and `tests/integration/test_function_migrations.py` fails when a file changes
without a migration pinning it. A change of a function's signature or result type needs a
`DROP FUNCTION` of the old one in the migration (CREATE OR REPLACE cannot change them).

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
);
-- The owner's alone: a downgrade runs these bodies as the owner, so no other role may
-- write them (default privileges may have granted the service role SELECT, INSERT).
DO $revoke$
DECLARE
  g text;
BEGIN
  FOR g IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
            WHERE table_schema = current_schema() AND table_name = 'sql_functions'
              AND grantee <> current_user LOOP
    IF g = 'PUBLIC' THEN
      REVOKE ALL ON sql_functions FROM PUBLIC;
    ELSE
      EXECUTE format('REVOKE ALL ON sql_functions FROM %I', g);
    END IF;
  END LOOP;
END $revoke$;
"""


class FunctionSourceError(RuntimeError):
    """No text of a function has the hash a migration pinned."""


def sha256(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def source(name: str, *, revision: str | None = None, pinned: str | None = None) -> str:
    """The statement of function `name`: the head file, or (when the head file's hash is not
    `pinned`) the copy kept for `revision`, which must have that hash."""
    head = SQL / f"{name}.sql"
    body = head.read_text()
    if pinned is None or sha256(body) == pinned:
        return body
    kept = SQL / str(revision) / f"{name}.sql"
    if kept.exists() and sha256(kept.read_text()) == pinned:
        return kept.read_text()
    raise FunctionSourceError(
        f"migration {revision} pins {name} at sha256 {pinned[:12]}..., but {head.relative_to(SQL.parent)} "
        f"is {sha256(body)[:12]}... and no {kept.relative_to(SQL.parent)} has it: keep the text that "
        "migration installs there (see migrations/functions.py)"
    )


def install(op: Any, name: str, *, revision: str, pinned: str) -> None:
    """Create (or replace) function `name` with the text `revision` pinned; record it.

    The statement is sent to the driver as it is (no bind parameters are parsed in it)."""
    body = source(name, revision=revision, pinned=pinned)
    bind = op.get_bind()
    _raw(bind, REGISTRY)
    _raw(bind, body)
    bind.execute(
        text(
            "INSERT INTO sql_functions (name, revision, sha256, body) "
            "VALUES (:name, :revision, :sha256, :body) "
            "ON CONFLICT (name, revision) DO UPDATE SET sha256 = EXCLUDED.sha256, body = EXCLUDED.body, "
            "installed_at = clock_timestamp()"
        ),
        {"name": name, "revision": revision, "sha256": sha256(body), "body": body},
    )


def install_all(op: Any, functions: dict[str, str], *, revision: str) -> None:
    """`install` each of `functions` (name -> pinned sha256), in their order."""
    for name, pinned in functions.items():
        install(op, name, revision=revision, pinned=pinned)


def _raw(bind: Any, statement: str) -> None:
    """Run `statement` on the migration's connection (its transaction) with no parameters,
    so nothing in it (a `%` or a `:name` in PL/pgSQL) is taken for a placeholder."""
    with bind.connection.dbapi_connection.cursor() as cursor:
        cursor.execute(statement)


def uninstall(op: Any, *, revision: str, previous: dict[str, str] | None = None) -> None:
    """Undo every `install` of `revision`, last installed first.

    Each function gets back the body the latest earlier revision recorded for it in
    `sql_functions` (its hash checked); failing that, `previous[name]` (a statement, e.g.
    `defined_by(...)` of the landed migration that last defined it); failing that, it did
    not exist before: it is dropped (every overload of that name in the current schema)."""
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
            text(
                "SELECT body, sha256, revision FROM sql_functions "
                "WHERE name = :name AND revision < :revision ORDER BY revision DESC LIMIT 1"
            ),
            {"name": name, "revision": revision},
        ).first()
        restore: str | None = None
        if earlier is not None:
            if sha256(earlier.body) != earlier.sha256:
                raise FunctionSourceError(
                    f"sql_functions' body of {name} at {earlier.revision} fails its hash"
                )
            restore = earlier.body
        elif previous is not None:
            restore = previous.get(name)
        if restore is not None:
            _raw(bind, restore)
            continue
        for (signature,) in bind.execute(
            text(
                "SELECT CAST(CAST(p.oid AS regprocedure) AS text) FROM pg_proc p "
                "WHERE p.proname = :name AND p.pronamespace = CAST(current_schema() AS regnamespace)"
            ),
            {"name": name},
        ).all():
            bind.exec_driver_sql(f"DROP FUNCTION {signature}")
    if bind.execute(text("SELECT count(*) FROM sql_functions")).scalar() == 0:
        bind.exec_driver_sql("DROP TABLE sql_functions")


if __name__ == "__main__":  # python -m migrations.functions NAME...: the sha256 to pin
    import sys

    for arg in sys.argv[1:]:
        print(f'    "{arg}": "{sha256((SQL / f"{arg}.sql").read_text())}",')
