"""Leaner postings: the same invariants for less work per money movement.

- The balance check runs once per journal transaction (a deferred constraint trigger
  on journal_transactions) instead of once per entry. It still sees every entry:
  entries can only be added inside the database transaction that created their
  journal transaction (checked on each entry insert), and once the check has run
  (at commit, or earlier under SET CONSTRAINTS ... IMMEDIATE) it adds the journal
  transaction's id to one transaction-local setting (`ledger.sealed`), after which the
  entry trigger refuses further entries for it.
- The entries' foreign keys (to their journal transaction, and to their account's
  (id, currency)) become checks in the entry trigger. Accounts and journal
  transactions are never deleted and never change id or currency (0001's triggers),
  so a check at insert is as strong as a foreign key, and it takes no row lock: a
  foreign key takes a share lock on the referenced row, which for the revenue
  shards and for price versions is a row many concurrent transactions would share.
- holds.price_version likewise: checked by the hold trigger (price versions are
  immutable and never deleted), so no reserve locks the price-version row.
- Indexes that nothing needs are dropped: journal_entries (transaction_id) is
  replaced by a (transaction_id, id) primary key; (account_id, created_at) by the
  (account_id, transaction_id) index; holds (state, id) and (account_id, id) by the
  primary key, the partial open/interrupted indexes and (account_id, idempotency_key).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UPGRADE = r"""
DROP TRIGGER journal_entries_balanced ON journal_entries;
CREATE FUNCTION ledger_check_transaction_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  n_entries bigint;
  bad_currency text;
  bad_sum numeric;
BEGIN
  SELECT coalesce(sum(c), 0), min(currency) FILTER (WHERE s <> 0), min(s) FILTER (WHERE s <> 0)
    INTO n_entries, bad_currency, bad_sum
    FROM (SELECT currency, sum(amount) AS s, count(*) AS c
            FROM journal_entries WHERE transaction_id = NEW.id
           GROUP BY currency) per_currency;
  IF n_entries < 2 THEN
    RAISE EXCEPTION 'ledger: journal transaction % has fewer than two entries', NEW.id
      USING ERRCODE = 'check_violation';
  END IF;
  IF bad_currency IS NOT NULL THEN
    RAISE EXCEPTION 'ledger: journal transaction % is unbalanced: % entries sum to %',
      NEW.id, bad_currency, bad_sum USING ERRCODE = 'check_violation';
  END IF;
  -- Checked: no entry may join this journal transaction any more (see ledger_entry_post).
  -- One transaction-local setting lists the ids checked so far (',12,13,'); it resets at
  -- commit, so it never grows beyond one database transaction's journal transactions.
  PERFORM set_config('ledger.sealed', coalesce(nullif(current_setting('ledger.sealed', true), ''), ',')
                     || NEW.id || ',', true);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER journal_transactions_balanced AFTER INSERT ON journal_transactions
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_check_transaction_balanced();
DROP FUNCTION ledger_check_balanced();

ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_account_currency;
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_transaction_id_fkey;
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_pkey;
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_pkey PRIMARY KEY (transaction_id, id);
DROP INDEX journal_entries_transaction;
DROP INDEX journal_entries_account_time;

CREATE OR REPLACE FUNCTION ledger_entry_post() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  txn_xact xid8;
  account_currency char(3);
  account_kind text;
BEGIN
  SELECT xact_id INTO txn_xact FROM journal_transactions WHERE id = NEW.transaction_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'ledger: journal transaction % does not exist', NEW.transaction_id
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  IF txn_xact <> pg_current_xact_id() THEN
    RAISE EXCEPTION 'ledger: entries may only be added to a journal transaction created in the same database transaction'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF strpos(coalesce(current_setting('ledger.sealed', true), ''), ',' || NEW.transaction_id || ',') > 0 THEN
    RAISE EXCEPTION 'ledger: journal transaction % was already checked as balanced; it takes no more entries',
      NEW.transaction_id USING ERRCODE = 'restrict_violation';
  END IF;
  NEW.created_at := now();
  UPDATE accounts
     SET balance = balance + NEW.amount,
         held = held + CASE WHEN NEW.book = 'hold' THEN NEW.amount ELSE 0 END
   WHERE id = NEW.account_id AND kind = 'customer' AND currency = NEW.currency
   RETURNING balance, held INTO NEW.balance_after, NEW.held_after;
  IF NOT FOUND THEN
    SELECT currency, kind INTO account_currency, account_kind FROM accounts WHERE id = NEW.account_id;
    IF NOT FOUND OR account_currency <> NEW.currency THEN
      RAISE EXCEPTION 'ledger: entry account % does not exist in currency %', NEW.account_id, NEW.currency
        USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF account_kind = 'customer' THEN
      RAISE EXCEPTION 'ledger: could not apply the entry to account %', NEW.account_id
        USING ERRCODE = 'internal_error';
    END IF;
    IF NEW.book <> 'main' THEN
      RAISE EXCEPTION 'ledger: system accounts have no hold book' USING ERRCODE = 'check_violation';
    END IF;
    NEW.balance_after := NULL;
    NEW.held_after := NULL;
  END IF;
  RETURN NEW;
END $$;

ALTER TABLE holds DROP CONSTRAINT holds_price_version_fkey;
CREATE OR REPLACE FUNCTION ledger_hold_price_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM price_versions WHERE version = NEW.price_version AND currency = NEW.currency;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'ledger: price version % does not exist in %', NEW.price_version, NEW.currency
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER holds_price_version BEFORE INSERT ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_price_version();
DROP INDEX holds_state_id;
DROP INDEX holds_account_id;
"""

DOWNGRADE = r"""
CREATE INDEX holds_account_id ON holds (account_id, id);
CREATE INDEX holds_state_id ON holds (state, id);
DROP TRIGGER holds_price_version ON holds;
DROP FUNCTION ledger_hold_price_version();
ALTER TABLE holds ADD CONSTRAINT holds_price_version_fkey FOREIGN KEY (price_version)
  REFERENCES price_versions (version);
CREATE INDEX journal_entries_account_time ON journal_entries (account_id, created_at);
CREATE INDEX journal_entries_transaction ON journal_entries (transaction_id);
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_pkey;
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_pkey PRIMARY KEY (id);
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_transaction_id_fkey
  FOREIGN KEY (transaction_id) REFERENCES journal_transactions (id);
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_account_currency
  FOREIGN KEY (account_id, currency) REFERENCES accounts (id, currency);
DROP TRIGGER journal_transactions_balanced ON journal_transactions;
DROP FUNCTION ledger_check_transaction_balanced();
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
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
