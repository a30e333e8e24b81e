"""The checks at commit, and the entry trigger, plan index probes however small the tables were.

A group-commit batch commits on its lane's connection, which lives as long as the
service; so do the SQLAlchemy pool's. PostgreSQL keeps each PL/pgSQL statement's plan
per connection, and after five calls it may keep one generic plan for good: if that
plan was made while a table was small (a new deployment, or statistics not refreshed:
this machine runs with autovacuum off), a sequential scan looked as cheap as an index
probe, and it stays a sequential scan while the table grows.

`ledger_hold_batch` and `ledger_entries_apply` were already planned with sequential
scans, hash and merge joins switched off (0016, 0017), but the checks that run when the
batch commits are deferred triggers, which run after the function has returned, without
its settings. Measured with `bench/bench_holds.py --accounts 50` (every statement timed
with pg_stat_statements): the hold-journal check at commit took 0.8 ms per hold at
14,000 journal transactions, a sequential scan of journal_transactions (auto_explain:
"Rows Removed by Filter: 13971"), more with every cycle; with 1,000 accounts the same
check took 13 us, because its plan happened to be made after the setup's VACUUM
ANALYZE had seen 1,000 transactions.

Now every trigger function on those paths plans with sequential scans switched off (and
the one with a join, hash and merge joins too), the same settings as 0016 gave the
batch's functions: each query is a lookup by a key that has an index, so with these
settings its only plans are index probes:

| function | runs | its lookups (index) |
|---|---|---|
| ledger_hold_journal_check | at commit, per hold written | journal_transactions by hold_id (journal_transactions_hold), their entries (journal_entries_pkey) |
| ledger_check_transaction_balanced | at commit, per journal transaction | its entries (journal_entries_pkey) |
| ledger_alert_crossing | at commit, per account whose available amount moved | account_alerts by account (account_alerts_pkey) |
| ledger_entry_post | per entry outside the batch | journal_transactions, grants, accounts by primary key |
| ledger_hold_price_version | per new hold | price_versions by version (price_versions_version_key) |

What each function checks, and how it refuses, is unchanged: only the plans change.
`tests/integration/test_batch_plans.py` now also reads the plans of the checks at
commit, on a new database with empty tables, and refuses a sequential scan of any of
these tables.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER FUNCTION ledger_hold_journal_check()
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION ledger_check_transaction_balanced() SET enable_seqscan = off;
ALTER FUNCTION ledger_alert_crossing() SET enable_seqscan = off;
ALTER FUNCTION ledger_entry_post() SET enable_seqscan = off;
ALTER FUNCTION ledger_hold_price_version() SET enable_seqscan = off;
"""

DOWNGRADE = r"""
ALTER FUNCTION ledger_hold_journal_check() RESET ALL;
ALTER FUNCTION ledger_check_transaction_balanced() RESET ALL;
ALTER FUNCTION ledger_alert_crossing() RESET enable_seqscan;
ALTER FUNCTION ledger_entry_post() RESET ALL;
ALTER FUNCTION ledger_hold_price_version() RESET ALL;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
