"""Flag over-factor settles on the hold and mark the account for review.

- `holds.overage_flagged`: true when a settle (or true-up) charged more than
  `LEDGER_MAX_OVERAGE_FACTOR` x the hold's amount. A new hold starts unflagged; the
  flag is set only by the row change that sets the charge (open|interrupted ->
  settled, or the gateway's late settle that trues it up), and it is never cleared: the fact
  that an implausible charge was recorded is history, not state.
- `accounts.review`: NULL, or the mark left by the last flagged settle,
  `{"reason", "hold_id", "at"}`. It moves no money, so the account guard of 0001
  (id, kind, currency, created_at never change; balance and held only through
  entries) stays exactly as strict: only this column is added beside it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE holds ADD COLUMN overage_flagged boolean NOT NULL DEFAULT false;
ALTER TABLE accounts ADD COLUMN review jsonb
  CONSTRAINT accounts_review_shape CHECK (
    review IS NULL OR (jsonb_typeof(review) = 'object' AND review ? 'reason' AND review ? 'at'));
CREATE INDEX accounts_under_review ON accounts (id) WHERE review IS NOT NULL;

CREATE FUNCTION ledger_hold_overage_flag_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.overage_flagged THEN
      RAISE EXCEPTION 'ledger: a new hold is not flagged' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.overage_flagged IS DISTINCT FROM OLD.overage_flagged THEN
    IF NOT NEW.overage_flagged THEN
      RAISE EXCEPTION 'ledger: hold % overage flag is never cleared', NEW.id USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.state <> 'settled' OR (OLD.state NOT IN ('open', 'interrupted')
       AND (NEW.charged, NEW.gateway_usage) IS NOT DISTINCT FROM (OLD.charged, OLD.gateway_usage)) THEN
      RAISE EXCEPTION 'ledger: hold % is flagged only by the settle or true-up that sets its charge', NEW.id
        USING ERRCODE = 'check_violation';
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER holds_overage_flag_guard BEFORE INSERT OR UPDATE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_overage_flag_guard();
"""

DOWNGRADE = r"""
DROP TRIGGER holds_overage_flag_guard ON holds;
DROP FUNCTION ledger_hold_overage_flag_guard();
DROP INDEX accounts_under_review;
ALTER TABLE accounts DROP COLUMN review;
ALTER TABLE holds DROP COLUMN overage_flagged;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
