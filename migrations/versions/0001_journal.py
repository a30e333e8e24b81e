"""Accounts, the double-entry journal, idempotency records and the audit log.

Invariants enforced by the database itself, for any SQL, not only the service's:
- every journal transaction has >= 2 entries and they sum to zero per currency
  (a deferred constraint trigger, checked at commit);
- entries are only added inside the database transaction that created their
  journal transaction (so a committed transaction can never be extended);
- journal transactions, entries, idempotency records and the audit log are
  append-only: UPDATE, DELETE and TRUNCATE raise;
- an entry's amount is never zero and its currency equals its account's (FK on
  (account_id, currency));
- an account's cached `balance` and `held` change only through entries (the
  entry trigger applies them; a direct UPDATE of either raises), `held` >= 0,
  and accounts are never deleted nor change id, kind or currency.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: % on % is refused: rows are append-only', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'restrict_violation';
END $$;

CREATE TABLE accounts (
  id           text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
  kind         text NOT NULL DEFAULT 'customer' CHECK (kind IN ('customer', 'system')),
  currency     char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  credit_limit numeric(38, 12) NOT NULL DEFAULT 0 CHECK (credit_limit >= 0),
  balance      numeric(38, 12) NOT NULL DEFAULT 0,
  held         numeric(38, 12) NOT NULL DEFAULT 0 CHECK (held >= 0),
  metadata     jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT accounts_id_currency UNIQUE (id, currency),
  CONSTRAINT accounts_system_prefix CHECK ((kind = 'system') = (id LIKE 'system:%'))
);
CREATE INDEX accounts_kind_created ON accounts (kind, created_at, id);

CREATE FUNCTION ledger_account_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
  -- balance and held are a cache of the entries: only the entry trigger (depth > 1) moves them.
  IF (NEW.balance <> OLD.balance OR NEW.held <> OLD.held) AND pg_trigger_depth() < 2 THEN
    RAISE EXCEPTION 'ledger: balance and held change only through journal entries'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER accounts_guard BEFORE INSERT OR UPDATE OR DELETE ON accounts
  FOR EACH ROW EXECUTE FUNCTION ledger_account_guard();
CREATE TRIGGER accounts_no_truncate BEFORE TRUNCATE ON accounts
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

CREATE TABLE journal_transactions (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind        text NOT NULL CHECK (kind IN ('deposit', 'adjustment', 'reserve', 'settle', 'release', 'true_up')),
  account_id  text NOT NULL REFERENCES accounts (id),
  hold_id     uuid,
  reference   text,
  reason      text,
  actor       text NOT NULL,
  xact_id     xid8 NOT NULL DEFAULT pg_current_xact_id(),
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX journal_transactions_hold ON journal_transactions (hold_id) WHERE hold_id IS NOT NULL;

CREATE TABLE journal_entries (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  transaction_id bigint NOT NULL REFERENCES journal_transactions (id),
  account_id     text NOT NULL,
  currency       char(3) NOT NULL,
  book           text NOT NULL DEFAULT 'main' CHECK (book IN ('main', 'hold')),
  amount         numeric(38, 12) NOT NULL CHECK (amount <> 0),
  balance_after  numeric(38, 12),
  held_after     numeric(38, 12),
  created_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT journal_entries_account_currency FOREIGN KEY (account_id, currency)
    REFERENCES accounts (id, currency)
);
CREATE INDEX journal_entries_transaction ON journal_entries (transaction_id);
CREATE INDEX journal_entries_account ON journal_entries (account_id, transaction_id);
CREATE INDEX journal_entries_account_time ON journal_entries (account_id, created_at);

-- Applies an entry to its customer account's cached balance and records the running
-- balance on the entry. The caller has locked the account row (FOR UPDATE) first.
CREATE FUNCTION ledger_entry_post() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  txn_xact xid8;
BEGIN
  SELECT xact_id INTO txn_xact FROM journal_transactions WHERE id = NEW.transaction_id;
  IF txn_xact IS DISTINCT FROM pg_current_xact_id() THEN
    RAISE EXCEPTION 'ledger: entries may only be added to a journal transaction created in the same database transaction'
      USING ERRCODE = 'restrict_violation';
  END IF;
  NEW.created_at := now();
  UPDATE accounts
     SET balance = balance + NEW.amount,
         held = held + CASE WHEN NEW.book = 'hold' THEN NEW.amount ELSE 0 END
   WHERE id = NEW.account_id AND kind = 'customer'
   RETURNING balance, held INTO NEW.balance_after, NEW.held_after;
  IF NOT FOUND THEN
    NEW.balance_after := NULL;
    NEW.held_after := NULL;
    IF NEW.book <> 'main' THEN
      RAISE EXCEPTION 'ledger: system accounts have no hold book' USING ERRCODE = 'check_violation';
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER journal_entries_post BEFORE INSERT ON journal_entries
  FOR EACH ROW EXECUTE FUNCTION ledger_entry_post();

-- Checked at commit: the transaction's entries sum to zero per currency, and there are >= 2.
CREATE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  n_entries bigint;
  bad_currency text;
  bad_sum numeric;
BEGIN
  SELECT sum(c), min(currency) FILTER (WHERE s <> 0), min(s) FILTER (WHERE s <> 0)
    INTO n_entries, bad_currency, bad_sum
    FROM (SELECT currency, sum(amount) AS s, count(*) AS c
            FROM journal_entries WHERE transaction_id = NEW.transaction_id
           GROUP BY currency) per_currency;
  IF n_entries < 2 THEN
    RAISE EXCEPTION 'ledger: journal transaction % has fewer than two entries', NEW.transaction_id
      USING ERRCODE = 'check_violation';
  END IF;
  IF bad_currency IS NOT NULL THEN
    RAISE EXCEPTION 'ledger: journal transaction % is unbalanced: % entries sum to %',
      NEW.transaction_id, bad_currency, bad_sum USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER journal_entries_balanced AFTER INSERT ON journal_entries
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_check_balanced();

CREATE TRIGGER journal_entries_append_only BEFORE UPDATE OR DELETE ON journal_entries
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER journal_entries_no_truncate BEFORE TRUNCATE ON journal_entries
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER journal_transactions_append_only BEFORE UPDATE OR DELETE ON journal_transactions
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER journal_transactions_no_truncate BEFORE TRUNCATE ON journal_transactions
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

CREATE TABLE idempotency_keys (
  account_id      text NOT NULL REFERENCES accounts (id),
  scope           text NOT NULL,
  idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
  request_hash    text NOT NULL,
  transaction_id  bigint REFERENCES journal_transactions (id),
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, scope, idempotency_key)
);
CREATE TRIGGER idempotency_keys_append_only BEFORE UPDATE OR DELETE ON idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER idempotency_keys_no_truncate BEFORE TRUNCATE ON idempotency_keys
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

CREATE TABLE audit_log (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT now(),
  actor       text NOT NULL,
  role        text NOT NULL,
  action      text NOT NULL,
  target      text,
  reason      text,
  details     jsonb NOT NULL DEFAULT '{}'::jsonb,
  request_id  text
);
CREATE INDEX audit_log_target ON audit_log (target, id);
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
"""

DOWNGRADE = r"""
DROP TABLE audit_log;
DROP TABLE idempotency_keys;
DROP TABLE journal_entries;
DROP TABLE journal_transactions;
DROP TABLE accounts;
DROP FUNCTION ledger_check_balanced();
DROP FUNCTION ledger_entry_post();
DROP FUNCTION ledger_account_guard();
DROP FUNCTION ledger_refuse_change();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
