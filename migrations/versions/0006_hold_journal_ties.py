"""Tie every hold to the journal, so direct SQL cannot make a hold say what the books do not.

Checked at commit (a deferred constraint trigger on holds), against the journal
transactions of that hold written in the same database transaction:
- a new hold with an amount > 0 has a `reserve` transaction putting exactly that
  amount in the account's hold book;
- open|interrupted -> settled has a `settle` transaction taking the amount out of the
  hold book and crediting the revenue shards with exactly `charged`;
- open|interrupted -> released has a `release` transaction taking the amount out of
  the hold book;
- a final hold's charge changes only with a `true_up` transaction crediting revenue
  with exactly the difference, and `true_up` grows by that difference.

Checked on every row change (the hold guard): while a hold is unresolved it has no
charge, release, overage or true-up; a settle's `released` and `overage` follow from
`amount` and `charged`, and `charge.amount` equals `charged`; `released` of a final hold
never changes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION ledger_hold_money_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state IN ('open', 'interrupted') THEN
    IF NEW.charge IS NOT NULL OR NEW.charged IS NOT NULL OR NEW.released IS NOT NULL
       OR NEW.overage IS NOT NULL OR NEW.true_up IS NOT NULL THEN
      RAISE EXCEPTION 'ledger: an unresolved hold has no charge, release, overage or true-up'
        USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.state = 'settled' THEN
    IF (NEW.charge ->> 'amount')::numeric IS DISTINCT FROM NEW.charged THEN
      RAISE EXCEPTION 'ledger: hold % charge.amount differs from charged', NEW.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.overage IS DISTINCT FROM greatest(NEW.charged - NEW.amount, 0) THEN
      RAISE EXCEPTION 'ledger: hold % overage must be max(charged - amount, 0)', NEW.id
        USING ERRCODE = 'check_violation';
    END IF;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    IF OLD.state IN ('open', 'interrupted') THEN
      IF NEW.state = 'settled' AND NEW.released IS DISTINCT FROM greatest(NEW.amount - NEW.charged, 0) THEN
        RAISE EXCEPTION 'ledger: hold % released must be max(amount - charged, 0)', NEW.id
          USING ERRCODE = 'check_violation';
      END IF;
      IF NEW.state = 'released' AND (NEW.released IS DISTINCT FROM NEW.amount OR NEW.charged IS NOT NULL) THEN
        RAISE EXCEPTION 'ledger: a released hold releases its whole amount and charges nothing'
          USING ERRCODE = 'check_violation';
      END IF;
    ELSIF NEW.released IS DISTINCT FROM OLD.released THEN
      RAISE EXCEPTION 'ledger: what a resolved hold released never changes' USING ERRCODE = 'restrict_violation';
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER holds_money_guard BEFORE INSERT OR UPDATE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_money_guard();

CREATE FUNCTION ledger_hold_journal_check() RETURNS trigger LANGUAGE plpgsql AS $$
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
    RETURN NULL;  -- checkpoints and interrupts move no money
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
CREATE CONSTRAINT TRIGGER holds_journal_ties AFTER INSERT OR UPDATE ON holds
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_hold_journal_check();
"""

DOWNGRADE = r"""
DROP TRIGGER holds_journal_ties ON holds;
DROP FUNCTION ledger_hold_journal_check();
DROP TRIGGER holds_money_guard ON holds;
DROP FUNCTION ledger_hold_money_guard();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
