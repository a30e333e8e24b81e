"""Least privilege: the database role the service runs as, and exactly what it may do.

Migrations run as the schema owner. The service (serve, worker, scheduler, reconcile)
runs as a separate role that `grant_service_role` grants only what the code needs:

- every table: SELECT and INSERT. Append-only tables (journal, idempotency keys,
  audit log, price versions, job runs) get nothing more, so an UPDATE or DELETE is
  refused by a missing privilege before the append-only triggers even run;
- UPDATE only on the tables the service changes in place (`UPDATABLE`): `accounts`
  (the entry trigger moves the cached balance, and `FOR UPDATE` locks need it),
  `holds` (state changes), `reconciliation_runs` (a run's totals, until finished),
  `budgets` (a key's held and spent move with its holds; finance sets its terms);
  `grants` (the entry trigger moves a grant's cached remaining; settles lock grant rows);
  `account_alerts` (threshold, armed side) and `alert_events` (delivery state, until finished);
  `console_sessions` (logout sets `revoked_at`; expired rows are pruned by a function
  of the owner's, never by a DELETE of the service's);
  `plans` (a new revision moves its current one; `plan_revisions` and `plan_rates` are
  append-only);
- `alembic_version`: SELECT only (`/readyz` compares it with the code's head);
- `sql_functions` (the function bodies the migrations installed, which a downgrade runs
  as the owner): nothing at all;
- identity sequences: USAGE; schema `public`: USAGE, and nobody but the owner may
  CREATE in it;
- never TRUNCATE, DELETE, REFERENCES or TRIGGER, and no ownership: ALTER TABLE,
  `DISABLE TRIGGER` and `SET session_replication_role` (superuser only) are refused.

The grant is idempotent and complete: each run first revokes everything the role
holds on each table, then grants the list above, so re-running it after a migration
covers new tables and corrects any drift. Tables the owner creates later get SELECT
and INSERT by default privileges until the next run (a new table that needs UPDATE
must be added to `UPDATABLE`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from ledger.database_url import conninfo

UPDATABLE = frozenset(
    {
        "accounts",
        "holds",
        "reconciliation_runs",
        "budgets",
        "grants",
        "account_alerts",
        "alert_events",
        "console_sessions",
        "plans",
    }
)
READ_ONLY = frozenset({"alembic_version"})
NO_ACCESS = frozenset({"sql_functions"})


class RoleError(ValueError):
    """The role cannot be made the service role (missing, superuser, or the owner itself)."""


def privileges_for(table: str) -> tuple[str, ...]:
    if table in NO_ACCESS:
        return ()
    if table in READ_ONLY:
        return ("SELECT",)
    if table in UPDATABLE:
        return ("SELECT", "INSERT", "UPDATE")
    return ("SELECT", "INSERT")


def grant_service_role(database_url: str, role: str) -> dict[str, Any]:
    """Grant `role` the service's privileges on every table of schema public, in one transaction.

    Run as the schema owner (the migration URL). Returns what was granted, per table.
    """
    with psycopg.connect(conninfo(database_url)) as conn:
        found = conn.execute(
            "SELECT rolsuper, rolname = current_user FROM pg_roles WHERE rolname = %s", (role,)
        ).fetchone()
        if found is None:
            raise RoleError(f"role {role!r} does not exist (CREATE ROLE {role} LOGIN PASSWORD ... first)")
        if found[0]:
            raise RoleError(f"role {role!r} is a superuser: it bypasses every privilege")
        if found[1]:
            raise RoleError(f"role {role!r} is the role running the grant (the owner); use a role of its own")
        who = sql.Identifier(role)
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
            )
        ]
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(who))
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC, {}").format(who))
        granted: dict[str, list[str]] = {}
        for table in tables:
            privileges = privileges_for(table)
            name = sql.Identifier("public", table)
            conn.execute(sql.SQL("REVOKE ALL ON TABLE {} FROM {}").format(name, who))
            if privileges:
                conn.execute(
                    sql.SQL("GRANT {} ON TABLE {} TO {}").format(
                        sql.SQL(", ").join(sql.SQL(p) for p in privileges), name, who
                    )
                )
            granted[table] = list(privileges)
        conn.execute(sql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {}").format(who))
        conn.execute(sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {}").format(who))
        # Tables and sequences the owner creates later (the next migration) are usable at once.
        conn.execute(
            sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT ON TABLES TO {}").format(
                who
            )
        )
        conn.execute(
            sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE ON SEQUENCES TO {}").format(who)
        )
        conn.commit()
    return {"role": role, "tables": granted}
