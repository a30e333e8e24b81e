"""Credit grants: credit finance gives an account, each grant its own book of the account.

- `grants`: one row per grant (amount > 0, priority, expires_at, reason, who). Its
  money lives in the account's book `grant:<grant id>` (journal_entries.book), so a
  grant's remaining amount is the sum of that book's entries, and the account's
  cached `balance` (every book) includes it. `grants.remaining` and `grants.expired`
  are a cache of those entries: only the entry trigger moves them (a direct UPDATE
  of any column of a grant raises), 0 <= remaining <= amount (so no SQL can overdraw
  a grant book), and grants are never deleted.
- Which journal transaction may touch a grant book (checked on every entry):
  `grant` puts exactly the grant's amount into its empty book, against
  `system:grants:<CUR>` only; `settle` and `true_up` only take money out (negative),
  and only from a grant not yet expired (expires_at > now()); `grant_expiry` only
  after expires_at, and takes out all of what remains (remaining becomes 0), against
  `system:grants:<CUR>` only. No other kind may post to a grant book, and
  `system:grants:<CUR>` takes entries of `grant` and `grant_expiry` only.
- A new grant row must have its `grant` entry by commit (deferred constraint trigger).
- job_runs.job gains `expire_grants` (the scheduled expiry job).
- 0006's hold ties are extended over all the account's books: a reserve and a release
  leave the account's total unchanged, a settle lowers it by exactly `charged` (the
  legs may take part of it from grant books), a true-up by exactly the difference.
- journal_transactions.kind gains `grant` and `grant_expiry`; journal_entries.book
  gains `grant:<uuid>`. The two CHECK constraints are re-added NOT VALID: every
  existing row satisfies them (they only widen), and validating would scan the journal.

Revision ID: 0013
Revises: 0011
Create Date: 2026-12-03
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE journal_transactions DROP CONSTRAINT journal_transactions_kind_check;
ALTER TABLE journal_transactions ADD CONSTRAINT journal_transactions_kind_check CHECK (
  kind IN ('deposit', 'adjustment', 'reserve', 'settle', 'release', 'true_up', 'grant', 'grant_expiry')) NOT VALID;
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_book_check;
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_book_check CHECK (
  book IN ('main', 'hold')
  OR book ~ '^grant:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$') NOT VALID;

CREATE TABLE grants (
  id               uuid PRIMARY KEY,
  account_id       text NOT NULL,
  currency         char(3) NOT NULL,
  amount           numeric(38, 12) NOT NULL CHECK (amount > 0),
  remaining        numeric(38, 12) NOT NULL DEFAULT 0,
  expired          numeric(38, 12) NOT NULL DEFAULT 0 CHECK (expired >= 0),
  priority         integer NOT NULL CHECK (priority BETWEEN 0 AND 1000),
  expires_at       timestamptz NOT NULL,
  idempotency_key  text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
  request_hash     text NOT NULL,
  reason           text NOT NULL CHECK (length(btrim(reason)) > 0),
  reference        text,
  created_by       text NOT NULL,
  expired_at       timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT grants_account_currency FOREIGN KEY (account_id, currency) REFERENCES accounts (id, currency),
  CONSTRAINT grants_account_key UNIQUE (account_id, idempotency_key),
  CONSTRAINT grants_remaining_bounds CHECK (remaining >= 0 AND remaining + expired <= amount)
);
-- Live grants of an account (the settle's consumption lookup: empty for most accounts).
CREATE INDEX grants_account_live ON grants (account_id, priority, expires_at, id) WHERE remaining > 0;
-- What the expiry job scans.
CREATE INDEX grants_expiring ON grants (expires_at) WHERE remaining > 0;

CREATE FUNCTION ledger_grant_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.remaining <> 0 OR NEW.expired <> 0 OR NEW.expired_at IS NOT NULL THEN
      RAISE EXCEPTION 'ledger: a grant starts empty; its money arrives only through its grant entry'
        USING ERRCODE = 'check_violation';
    END IF;
    PERFORM 1 FROM accounts WHERE id = NEW.account_id AND kind = 'customer';
    IF NOT FOUND THEN
      RAISE EXCEPTION 'ledger: grants are given to customer accounts only' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'ledger: grants are never deleted' USING ERRCODE = 'restrict_violation';
  END IF;
  IF pg_trigger_depth() < 2 THEN
    RAISE EXCEPTION 'ledger: a grant changes only through journal entries' USING ERRCODE = 'restrict_violation';
  END IF;
  IF to_jsonb(NEW) - ARRAY['remaining', 'expired', 'expired_at']
     IS DISTINCT FROM to_jsonb(OLD) - ARRAY['remaining', 'expired', 'expired_at'] THEN
    RAISE EXCEPTION 'ledger: entries move a grant''s remaining and expired amounts only'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER grants_guard BEFORE INSERT OR UPDATE OR DELETE ON grants
  FOR EACH ROW EXECUTE FUNCTION ledger_grant_guard();
CREATE TRIGGER grants_no_truncate BEFORE TRUNCATE ON grants
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

CREATE FUNCTION ledger_grant_funded() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM journal_entries e JOIN journal_transactions t ON t.id = e.transaction_id
   WHERE e.account_id = NEW.account_id AND e.book = 'grant:' || NEW.id AND t.kind = 'grant';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'ledger: grant % has no grant journal entry', NEW.id USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER grants_funded AFTER INSERT ON grants
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_grant_funded();

-- 0005's entry trigger, plus the grant books (the `ELSIF` branch: main and hold entries
-- take exactly the path they took before, with one more column read).
CREATE OR REPLACE FUNCTION ledger_entry_post() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  txn_xact xid8;
  txn_kind text;
  account_currency char(3);
  account_kind text;
  g record;
  left_after numeric;
BEGIN
  SELECT xact_id, kind INTO txn_xact, txn_kind FROM journal_transactions WHERE id = NEW.transaction_id;
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
  IF NEW.book = 'main' AND txn_kind IN ('grant', 'grant_expiry')
     AND NEW.account_id IS DISTINCT FROM 'system:grants:' || NEW.currency THEN
    RAISE EXCEPTION 'ledger: a % transaction moves money between a grant book and system:grants:% only',
      txn_kind, NEW.currency USING ERRCODE = 'check_violation';
  ELSIF NEW.book LIKE 'grant:%' THEN
    SELECT id, account_id, amount, remaining, expired, expires_at INTO g
      FROM grants WHERE id = CAST(substr(NEW.book, 7) AS uuid);
    IF NOT FOUND OR g.account_id <> NEW.account_id THEN
      RAISE EXCEPTION 'ledger: book % is not a grant of account %', NEW.book, NEW.account_id
        USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF txn_kind = 'grant' THEN
      IF g.remaining <> 0 OR g.expired <> 0 OR NEW.amount <> g.amount THEN
        RAISE EXCEPTION 'ledger: a grant transaction puts exactly the grant''s amount into its empty book'
          USING ERRCODE = 'check_violation';
      END IF;
    ELSIF txn_kind IN ('settle', 'true_up') THEN
      IF NEW.amount > 0 OR g.expires_at <= now() THEN
        RAISE EXCEPTION 'ledger: a charge only takes from a grant that has not expired (grant %)', g.id
          USING ERRCODE = 'check_violation';
      END IF;
    ELSIF txn_kind = 'grant_expiry' THEN
      IF g.expires_at > now() OR NEW.amount > 0 THEN
        RAISE EXCEPTION 'ledger: grant % has not expired', g.id USING ERRCODE = 'check_violation';
      END IF;
    ELSE
      RAISE EXCEPTION 'ledger: a % transaction may not post to a grant book', txn_kind
        USING ERRCODE = 'check_violation';
    END IF;
    UPDATE grants
       SET remaining = remaining + NEW.amount,
           expired = expired - CASE WHEN txn_kind = 'grant_expiry' THEN NEW.amount ELSE 0 END,
           expired_at = CASE WHEN txn_kind = 'grant_expiry' THEN now() ELSE expired_at END
     WHERE id = g.id
     RETURNING remaining INTO left_after;
    IF txn_kind = 'grant_expiry' AND left_after <> 0 THEN
      RAISE EXCEPTION 'ledger: an expiry posts out all that remains of grant % (% left)', g.id, left_after
        USING ERRCODE = 'check_violation';
    END IF;
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
      RAISE EXCEPTION 'ledger: system accounts have no hold or grant book' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.account_id LIKE 'system:grants:%' AND txn_kind NOT IN ('grant', 'grant_expiry') THEN
      RAISE EXCEPTION 'ledger: % takes grant and grant_expiry entries only', NEW.account_id
        USING ERRCODE = 'check_violation';
    END IF;
    NEW.balance_after := NULL;
    NEW.held_after := NULL;
  END IF;
  RETURN NEW;
END $$;

-- 0006's ties, plus the account's total over all its books (main, hold, grants).
CREATE OR REPLACE FUNCTION ledger_hold_journal_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  kind_needed text;
  n_txns bigint;
  hold_book numeric;
  revenue numeric;
  account_total numeric;
  money_changed boolean;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.amount = 0 THEN
      RETURN NULL;
    END IF;
    kind_needed := 'reserve';
  ELSIF OLD.state IN ('open', 'interrupted') AND NEW.state = 'settled' THEN
    kind_needed := 'settle';
  ELSIF OLD.state IN ('open', 'interrupted') AND NEW.state = 'released' THEN
    kind_needed := 'release';
  ELSIF OLD.state IN ('settled', 'released') THEN
    money_changed := (NEW.charged, NEW.true_up) IS DISTINCT FROM (OLD.charged, OLD.true_up);
    IF NOT money_changed THEN
      IF (NEW.charge, NEW.overage, NEW.state) IS DISTINCT FROM (OLD.charge, OLD.overage, OLD.state) THEN
        RAISE EXCEPTION 'ledger: a resolved hold''s charge changes only with a true-up'
          USING ERRCODE = 'restrict_violation';
      END IF;
      RETURN NULL;
    END IF;
    kind_needed := 'true_up';
  ELSE
    RETURN NULL;  -- checkpoints and interrupts move no money
  END IF;

  SELECT count(DISTINCT t.id),
         coalesce(sum(e.amount) FILTER (WHERE e.book = 'hold' AND e.account_id = NEW.account_id), 0),
         coalesce(sum(e.amount) FILTER (WHERE e.account_id LIKE 'system:revenue:%'), 0),
         coalesce(sum(e.amount) FILTER (WHERE e.account_id = NEW.account_id), 0)
    INTO n_txns, hold_book, revenue, account_total
    FROM journal_transactions t LEFT JOIN journal_entries e ON e.transaction_id = t.id
   WHERE t.hold_id = NEW.id AND t.kind = kind_needed AND t.xact_id = pg_current_xact_id();

  IF kind_needed = 'reserve' AND (hold_book <> NEW.amount OR account_total <> 0) THEN
    RAISE EXCEPTION 'ledger: hold % reserves % but its reserve transaction holds % (account total %)',
      NEW.id, NEW.amount, hold_book, account_total USING ERRCODE = 'check_violation';
  ELSIF kind_needed IN ('settle', 'release') AND (hold_book <> -NEW.amount OR revenue <> coalesce(NEW.charged, 0)
        OR account_total <> -coalesce(NEW.charged, 0)
        OR (n_txns = 0 AND (NEW.amount <> 0 OR coalesce(NEW.charged, 0) <> 0))) THEN
    RAISE EXCEPTION 'ledger: hold % was % without a matching journal transaction (hold book %, revenue %, account total %)',
      NEW.id, NEW.state, hold_book, revenue, account_total USING ERRCODE = 'check_violation';
  ELSIF kind_needed = 'true_up' AND (
        revenue <> coalesce(NEW.charged, 0) - coalesce(OLD.charged, 0)
        OR coalesce(NEW.true_up, 0) - coalesce(OLD.true_up, 0) <> revenue
        OR account_total <> -revenue) THEN
    RAISE EXCEPTION 'ledger: hold % charge moved by % without a true-up of that amount (revenue %, account total %)',
      NEW.id, coalesce(NEW.charged, 0) - coalesce(OLD.charged, 0), revenue, account_total
      USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;

ALTER TABLE job_runs DROP CONSTRAINT job_runs_job_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_job_check CHECK (
  job IN ('reconcile', 'refresh_prices', 'check_integrity', 'expire_grants'));

INSERT INTO accounts (id, kind, currency)
SELECT DISTINCT 'system:grants:' || currency, 'system', currency FROM accounts
ON CONFLICT (id) DO NOTHING;
"""

DOWNGRADE = r"""
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM grants) THEN
    RAISE EXCEPTION 'ledger: grants exist; their journal entries cannot be represented without 0013';
  END IF;
END $$;
CREATE OR REPLACE FUNCTION ledger_hold_journal_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  kind_needed text;
  n_txns bigint;
  hold_book numeric;
  revenue numeric;
  money_changed boolean;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.amount = 0 THEN
      RETURN NULL;
    END IF;
    kind_needed := 'reserve';
  ELSIF OLD.state IN ('open', 'interrupted') AND NEW.state = 'settled' THEN
    kind_needed := 'settle';
  ELSIF OLD.state IN ('open', 'interrupted') AND NEW.state = 'released' THEN
    kind_needed := 'release';
  ELSIF OLD.state IN ('settled', 'released') THEN
    money_changed := (NEW.charged, NEW.true_up) IS DISTINCT FROM (OLD.charged, OLD.true_up);
    IF NOT money_changed THEN
      IF (NEW.charge, NEW.overage, NEW.state) IS DISTINCT FROM (OLD.charge, OLD.overage, OLD.state) THEN
        RAISE EXCEPTION 'ledger: a resolved hold''s charge changes only with a true-up'
          USING ERRCODE = 'restrict_violation';
      END IF;
      RETURN NULL;
    END IF;
    kind_needed := 'true_up';
  ELSE
    RETURN NULL;
  END IF;
  SELECT count(DISTINCT t.id),
         coalesce(sum(e.amount) FILTER (WHERE e.book = 'hold' AND e.account_id = NEW.account_id), 0),
         coalesce(sum(e.amount) FILTER (WHERE e.account_id LIKE 'system:revenue:%'), 0)
    INTO n_txns, hold_book, revenue
    FROM journal_transactions t LEFT JOIN journal_entries e ON e.transaction_id = t.id
   WHERE t.hold_id = NEW.id AND t.kind = kind_needed AND t.xact_id = pg_current_xact_id();
  IF kind_needed = 'reserve' AND hold_book <> NEW.amount THEN
    RAISE EXCEPTION 'ledger: hold % reserves % but its reserve transaction holds %', NEW.id, NEW.amount, hold_book
      USING ERRCODE = 'check_violation';
  ELSIF kind_needed IN ('settle', 'release') AND (hold_book <> -NEW.amount OR revenue <> coalesce(NEW.charged, 0)
        OR (n_txns = 0 AND (NEW.amount <> 0 OR coalesce(NEW.charged, 0) <> 0))) THEN
    RAISE EXCEPTION 'ledger: hold % was % without a matching journal transaction (hold book %, revenue %)',
      NEW.id, NEW.state, hold_book, revenue USING ERRCODE = 'check_violation';
  ELSIF kind_needed = 'true_up' AND (
        revenue <> coalesce(NEW.charged, 0) - coalesce(OLD.charged, 0)
        OR coalesce(NEW.true_up, 0) - coalesce(OLD.true_up, 0) <> revenue) THEN
    RAISE EXCEPTION 'ledger: hold % charge moved by % without a true-up of that amount (revenue %)',
      NEW.id, coalesce(NEW.charged, 0) - coalesce(OLD.charged, 0), revenue USING ERRCODE = 'check_violation';
  END IF;
  RETURN NULL;
END $$;
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
DROP TABLE grants;
-- job_runs keeps the wider job check: it is append-only, so expire_grants rows may exist.
DROP FUNCTION ledger_grant_funded();
DROP FUNCTION ledger_grant_guard();
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_book_check;
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_book_check CHECK (book IN ('main', 'hold'));
ALTER TABLE journal_transactions DROP CONSTRAINT journal_transactions_kind_check;
ALTER TABLE journal_transactions ADD CONSTRAINT journal_transactions_kind_check CHECK (
  kind IN ('deposit', 'adjustment', 'reserve', 'settle', 'release', 'true_up'));
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
