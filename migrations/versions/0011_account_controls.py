"""Account controls (freeze, credit limit and metadata changes) and a time index for reports.

- `accounts.frozen_at` / `frozen_reason`: set together or not at all. A frozen account
  refuses new reservations (checked by the reserve statement under the account lock);
  every other posting still applies.
- The account guard is narrowed: a direct UPDATE (not the entry trigger) may change
  exactly `credit_limit`, `metadata`, `frozen_at`, `frozen_reason` and `review` (0007) of a customer
  account, and nothing of a system account. The comparison is over the whole row minus
  those columns, so a column added later is refused until a migration allows it. The
  entry trigger (depth >= 2) still moves `balance` and `held` and nothing else.
- A BRIN index on `journal_entries.created_at`: statements and revenue reports select
  entries by time. BRIN costs next to nothing per insert (entries are append-only and
  their time follows their physical order), unlike the b-tree that 0005 dropped.

Revision ID: 0011
Revises: 0006
Create Date: 2026-12-03
"""

from alembic import op

revision = "0011"
down_revision = "0008"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE accounts ADD COLUMN frozen_at timestamptz, ADD COLUMN frozen_reason text,
  ADD CONSTRAINT accounts_frozen_pair CHECK ((frozen_at IS NULL) = (frozen_reason IS NULL));

CREATE OR REPLACE FUNCTION ledger_account_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.balance <> 0 OR NEW.held <> 0 THEN
      RAISE EXCEPTION 'ledger: an account starts at zero; money arrives only through entries'
        USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.frozen_at IS NOT NULL AND NEW.kind = 'system' THEN
      RAISE EXCEPTION 'ledger: system accounts are never frozen' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'ledger: accounts are never deleted' USING ERRCODE = 'restrict_violation';
  END IF;
  IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.currency <> OLD.currency
     OR NEW.created_at <> OLD.created_at THEN
    RAISE EXCEPTION 'ledger: an account''s id, kind, currency and created_at never change'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF pg_trigger_depth() >= 2 THEN
    -- The entry trigger: it sets balance and held only (hot path: no further checks).
    RETURN NEW;
  END IF;
  IF NEW.balance <> OLD.balance OR NEW.held <> OLD.held THEN
    RAISE EXCEPTION 'ledger: balance and held change only through journal entries'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF OLD.kind = 'system' AND to_jsonb(NEW) IS DISTINCT FROM to_jsonb(OLD) THEN
    RAISE EXCEPTION 'ledger: system accounts are not edited' USING ERRCODE = 'restrict_violation';
  END IF;
  IF to_jsonb(NEW) - ARRAY['credit_limit', 'metadata', 'frozen_at', 'frozen_reason', 'review']
     IS DISTINCT FROM to_jsonb(OLD) - ARRAY['credit_limit', 'metadata', 'frozen_at', 'frozen_reason', 'review'] THEN
    RAISE EXCEPTION 'ledger: only credit_limit, metadata, the freeze and the review mark of an account may be changed'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;

CREATE INDEX journal_entries_created_brin ON journal_entries USING brin (created_at);
"""

DOWNGRADE = r"""
DROP INDEX journal_entries_created_brin;
CREATE OR REPLACE FUNCTION ledger_account_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.balance <> 0 OR NEW.held <> 0 THEN
      RAISE EXCEPTION 'ledger: an account starts at zero; money arrives only through entries'
        USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'ledger: accounts are never deleted' USING ERRCODE = 'restrict_violation';
  END IF;
  IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.currency <> OLD.currency
     OR NEW.created_at <> OLD.created_at THEN
    RAISE EXCEPTION 'ledger: an account''s id, kind, currency and created_at never change'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF (NEW.balance <> OLD.balance OR NEW.held <> OLD.held) AND pg_trigger_depth() < 2 THEN
    RAISE EXCEPTION 'ledger: balance and held change only through journal entries'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
ALTER TABLE accounts DROP CONSTRAINT accounts_frozen_pair, DROP COLUMN frozen_reason, DROP COLUMN frozen_at;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
