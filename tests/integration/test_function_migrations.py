"""Migrations 0023, 0020, 0019, 0018, 0017, 0016 and 0015 go down to the functions before them and up again.

Their downgrades read those functions from the migrations that wrote them
(`migrations.functions.defined_by`), or from the bodies recorded in `sql_functions`
(`migrations.functions.install`, from 0023 on). At head, every function of
migrations/sql/ is in the database exactly as its file says.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from ledger.db import alembic_config, migrate
from ledger.settings import normalize_database_url
from migrations.functions import SQL, FunctionSourceError, defined_by, sha256, source
from tests import pg


@pytest.fixture
def scratch(pg_admin_url: str) -> Iterator[str]:
    name, url = pg.create_database(pg_admin_url)
    yield url
    pg.drop_database(pg_admin_url, name)


def sources(url: str) -> dict[str, tuple[str, list[str]]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT proname, prosrc, coalesce(proconfig, '{}') FROM pg_proc "
            "WHERE proname IN ('ledger_hold_batch', 'ledger_entries_apply')"
        ).fetchall()
    return {name: (source, list(config)) for name, source, config in rows}


def test_0016_downgrades_to_0015_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    migrate(url)
    head = sources(scratch)
    assert "u_read_balance" in head["ledger_entries_apply"][0]
    assert "array_agg(h.id), array_agg(h)" in head["ledger_hold_batch"][0]
    command.downgrade(alembic_config(url), "0015")
    previous = sources(scratch)
    assert "u_read_balance" not in previous["ledger_entries_apply"][0]
    assert "SELECT * INTO r FROM holds WHERE id" in previous["ledger_hold_batch"][0]
    assert "array_agg(h.id), array_agg(h)" not in previous["ledger_hold_batch"][0]
    migrate(url)
    assert sources(scratch) == head


def test_0015_downgrades_to_0013_s_entry_trigger(scratch: str) -> None:
    url = normalize_database_url(scratch)
    migrate(url)
    command.downgrade(alembic_config(url), "0014")
    with psycopg.connect(scratch) as conn:
        source = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'ledger_entry_post'").fetchone()
        batched = conn.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'journal_transactions' AND column_name = 'batched'"
        ).fetchone()
    assert source is not None and "txn_batched" not in source[0] and "grant_expiry" in source[0]
    assert batched is None
    migrate(url)


def test_0017_downgrades_to_0016_s_plans_and_entries_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    migrate(url)
    head = sources(scratch)
    column = (
        "SELECT 1 FROM information_schema.columns "
        "WHERE table_name = 'journal_entries' AND column_name = 'batched'"
    )
    trigger = "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'journal_entries_post'"
    assert "plan_cache_mode=force_generic_plan" in head["ledger_hold_batch"][1]
    assert (
        "(SELECT ac FROM accounts ac WHERE ac.id = x.account_id) AS acct" in head["ledger_entries_apply"][0]
    )
    with psycopg.connect(scratch) as conn:
        assert conn.execute(column).fetchone() is not None
        assert "WHEN ((NOT new.batched))" in conn.execute(trigger).fetchone()[0]  # type: ignore[index]
    command.downgrade(alembic_config(url), "0016")
    previous = sources(scratch)
    assert "plan_cache_mode=force_generic_plan" not in previous["ledger_hold_batch"][1]
    assert "CROSS JOIN LATERAL" in previous["ledger_hold_batch"][0]
    assert "LEFT JOIN LATERAL" in previous["ledger_entries_apply"][0]
    assert "e.marked" not in previous["ledger_entries_apply"][0]
    with psycopg.connect(scratch) as conn:
        assert conn.execute(column).fetchone() is None
        assert "WHEN" not in conn.execute(trigger).fetchone()[0]  # type: ignore[index]
    migrate(url)
    assert sources(scratch) == head


def test_0018_downgrades_to_0017_s_hold_guards_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    listing = (
        "SELECT string_agg(pg_get_triggerdef(oid), E'\\n' ORDER BY tgname) FROM pg_trigger "
        "WHERE tgrelid = 'holds'::regclass AND NOT tgisinternal"
    )
    migrate(url)
    with psycopg.connect(scratch) as conn:
        head = conn.execute(listing).fetchone()
    assert head is not None and "holds_guard_insert BEFORE INSERT" in head[0]
    command.downgrade(alembic_config(url), "0017")
    with psycopg.connect(scratch) as conn:
        previous = conn.execute(listing).fetchone()
    assert previous is not None and "_insert" not in previous[0]
    assert "holds_guard BEFORE INSERT OR DELETE OR UPDATE" in previous[0]
    migrate(url)
    with psycopg.connect(scratch) as conn:
        assert conn.execute(listing).fetchone() == head


def test_0019_downgrades_to_the_checks_settings_before_it_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    listing = (
        "SELECT proname, coalesce(proconfig, '{}') FROM pg_proc WHERE proname IN ("
        "'ledger_hold_journal_check', 'ledger_check_transaction_balanced', 'ledger_alert_crossing', "
        "'ledger_entry_post', 'ledger_hold_price_version') ORDER BY proname"
    )

    def settings() -> dict[str, list[str]]:
        with psycopg.connect(scratch) as conn:
            return {name: list(config) for name, config in conn.execute(listing).fetchall()}

    migrate(url)
    head = settings()
    assert len(head) == 5 and all("enable_seqscan=off" in config for config in head.values()), head
    assert "enable_hashjoin=off" in head["ledger_hold_journal_check"]
    assert "search_path=public, pg_temp" in head["ledger_alert_crossing"]
    command.downgrade(alembic_config(url), "0018")
    assert settings() == {
        "ledger_alert_crossing": ["search_path=public, pg_temp"],  # its own, from 0014
        "ledger_check_transaction_balanced": [],
        "ledger_entry_post": [],
        "ledger_hold_journal_check": [],
        "ledger_hold_price_version": [],
    }
    migrate(url)
    assert settings() == head


def test_0020_downgrades_to_0017_s_batch_function_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    migrate(url)
    head = sources(scratch)
    assert "a_lapsed" in head["ledger_hold_batch"][0]

    def lapsed_function() -> int:
        with psycopg.connect(scratch) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_proc WHERE proname = 'ledger_lapsed_grants'"
            ).fetchone()
        assert row is not None
        return int(row[0])

    assert lapsed_function() == 1
    command.downgrade(alembic_config(url), "0019")
    previous = sources(scratch)
    assert "a_lapsed" not in previous["ledger_hold_batch"][0]
    assert "AND (gr.expires_at > now()) IS TRUE" in previous["ledger_hold_batch"][0]
    assert lapsed_function() == 0
    migrate(url)
    assert sources(scratch) == head


def file_functions() -> dict[str, tuple[str, str]]:
    """Each migrations/sql/ file: its function's name, its body (between the dollar quotes), the file."""
    found = {}
    for path in sorted(SQL.glob("*.sql")):
        statement = path.read_text()
        match = re.search(r"CREATE OR REPLACE FUNCTION (\w+)\(.*?\bAS \$\$(.*)\$\$;\s*\Z", statement, re.S)
        assert match is not None, f"{path.name} is not one CREATE OR REPLACE FUNCTION ... $$; statement"
        assert match.group(1) == path.stem, f"{path.name} defines {match.group(1)}"
        found[path.stem] = (match.group(2), statement)
    return found


def test_at_head_every_function_in_migrations_sql_has_exactly_its_file_s_body(scratch: str) -> None:
    migrate(normalize_database_url(scratch))
    files = file_functions()
    assert "ledger_hold_batch" in files and "ledger_budget_move" in files
    with psycopg.connect(scratch) as conn:
        installed = dict(
            conn.execute(
                "SELECT proname, prosrc FROM pg_proc WHERE proname = ANY (%s)", (list(files),)
            ).fetchall()
        )
        recorded = {
            name: (sha, body)
            for name, sha, body in conn.execute(
                "SELECT DISTINCT ON (name) name, sha256, body FROM sql_functions "
                "ORDER BY name, installed_at DESC"
            ).fetchall()
        }
    for name, (body, statement) in files.items():
        assert installed.get(name) == body, f"{name} in the database is not its file's"
        assert recorded[name] == (sha256(statement), statement), f"{name}: its record is not its file's"


def test_0023_downgrades_to_0020_s_batch_function_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    migrate(url)
    head = sources(scratch)
    assert "ledger_budget_hold" in head["ledger_hold_batch"][0]

    def budget_functions() -> list[str]:
        with psycopg.connect(scratch) as conn:
            rows = conn.execute(
                "SELECT proname FROM pg_proc WHERE proname LIKE 'ledger_budget%%' ORDER BY proname"
            ).fetchall()
        return [name for (name,) in rows]

    def registry() -> bool:
        with psycopg.connect(scratch) as conn:
            return conn.execute("SELECT to_regclass('sql_functions') IS NOT NULL").fetchone() == (True,)

    def shared_functions() -> list[str]:
        with psycopg.connect(scratch) as conn:
            rows = conn.execute(
                "SELECT proname FROM pg_proc "
                "WHERE proname IN ('ledger_active_version', 'ledger_review_mark') ORDER BY proname"
            ).fetchall()
        return [name for (name,) in rows]

    assert len(budget_functions()) == 7 and registry()
    assert shared_functions() == ["ledger_active_version", "ledger_review_mark"]
    command.downgrade(alembic_config(url), "0022")
    assert shared_functions() == []
    previous = sources(scratch)
    assert (
        previous["ledger_hold_batch"][0]
        == defined_by("0020_grants_lapse_at_expiry.py", "ledger_hold_batch")
        .split("AS $$", 1)[1]
        .rsplit("$$;", 1)[0]
    )
    assert budget_functions() == [] and not registry()
    migrate(url)
    assert sources(scratch) == head
    assert len(budget_functions()) == 7 and registry()


def pins() -> list[tuple[str, str, str]]:
    """(revision, function, pinned sha256) of every migration that installs functions from files."""
    import importlib.util

    found = []
    for path in sorted((SQL.parent / "versions").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_migration_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, pinned in getattr(module, "FUNCTIONS", {}).items():
            found.append((module.revision, name, pinned))
    return found


def test_every_function_file_is_the_text_its_latest_migration_pins() -> None:
    """A file edited without a migration pinning the new text fails here (a database already
    at head would keep the old body); every earlier pin still finds its text (the head file
    or the copy kept for that revision), so a fresh database installs what each revision did."""
    latest: dict[str, tuple[str, str]] = {}
    for revision, name, pinned in pins():
        source(name, revision=revision, pinned=pinned)  # raises when no text has the hash
        latest[name] = max(latest.get(name, (revision, pinned)), (revision, pinned))
    files = {path.stem: sha256(path.read_text()) for path in SQL.glob("*.sql")}
    assert set(files) == set(latest), "every migrations/sql file is installed by a migration, and only those"
    for name, sha in files.items():
        revision, pinned = latest[name]
        assert sha == pinned, (
            f"migrations/sql/{name}.sql changed after {revision} pinned it: write a migration"
        )


def test_a_pin_no_text_has_is_refused() -> None:
    with pytest.raises(FunctionSourceError, match="ledger_review_mark"):
        source("ledger_review_mark", revision="0023", pinned="0" * 64)


def test_0024_downgrades_to_0023_s_functions_and_upgrades_again(scratch: str) -> None:
    url = normalize_database_url(scratch)
    migrate(url)

    def bodies() -> dict[str, str]:
        with psycopg.connect(scratch) as conn:
            rows = conn.execute(
                "SELECT proname, prosrc FROM pg_proc "
                "WHERE proname IN ('ledger_hold_batch', 'ledger_account_guard')"
            ).fetchall()
        return {name: body for name, body in rows}

    def tables() -> set[str]:
        with psycopg.connect(scratch) as conn:
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'plan%'"
            ).fetchall()
        return {name for (name,) in rows}

    head = bodies()
    assert "a_plan_revision" in head["ledger_hold_batch"]
    assert "'plan_revision'" in head["ledger_account_guard"]
    assert tables() == {"plans", "plan_revisions", "plan_rates"}
    command.downgrade(alembic_config(url), "0023")
    previous = bodies()
    assert "a_plan_revision" not in previous["ledger_hold_batch"]
    assert "plan_revision" not in previous["ledger_account_guard"]
    assert tables() == set()
    with psycopg.connect(scratch) as conn:
        columns = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'plan_revision'"
        ).fetchone()
    assert columns == (0,)
    migrate(url)
    assert bodies() == head


def test_0024_s_downgrade_is_refused_while_a_plan_exists(scratch: str) -> None:
    """Dropping the plan columns would re-price planned holds at list rates: refused, nothing
    changed; once no plan is left (only on a database where that is possible) it goes down."""
    url = normalize_database_url(scratch)
    migrate(url)
    with psycopg.connect(scratch) as conn:
        conn.execute("INSERT INTO plans (id, currency, revision, created_by) VALUES ('p1', 'USD', 1, 't')")
        conn.execute(
            "INSERT INTO plan_revisions (plan_id, revision, document, content_hash, created_by, reason) "
            "VALUES ('p1', 1, '{}', %s, 't', 'r')",
            ("0" * 64,),
        )
    with pytest.raises(Exception, match="while a price plan exists"):
        command.downgrade(alembic_config(url), "0023")
    with psycopg.connect(scratch) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0024",)
        assert conn.execute("SELECT count(*) FROM plans").fetchone() == (1,)
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = CAST('plans' AS regclass) AND NOT tgisinternal "
            "ORDER BY tgname"
        ).fetchall()
    assert [t for (t,) in triggers] == ["plans_guard", "plans_no_delete", "plans_no_truncate"]


def test_0024_adds_holds_plan_whole_not_valid_then_validates_it(scratch: str) -> None:
    """No CHECK scan of every hold at ADD CONSTRAINT (NOT VALID); VALIDATE, and it holds at head."""
    upgrade = (SQL.parent / "versions" / "0024_price_plans.py").read_text().split('UPGRADE = r"""', 1)[1]
    upgrade = upgrade.split('"""', 1)[0]
    added = re.search(r"ADD CONSTRAINT holds_plan_whole CHECK \(.*?\)\)( NOT VALID)?;", upgrade, re.S)
    assert added is not None and added.group(1) == " NOT VALID"
    assert "ALTER TABLE holds VALIDATE CONSTRAINT holds_plan_whole;" in upgrade
    migrate(normalize_database_url(scratch))
    with psycopg.connect(scratch) as conn:
        row = conn.execute(
            "SELECT convalidated FROM pg_constraint WHERE conname = 'holds_plan_whole'"
        ).fetchone()
    assert row == (True,)
