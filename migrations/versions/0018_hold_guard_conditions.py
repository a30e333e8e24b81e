"""Hold guards called only when they have something to refuse.

Three BEFORE triggers on holds ran their PL/pgSQL function for every new hold, and one
for every update, although for those rows the function could only return the row
unchanged. Each is now split by event, and the part that can only refuse is given a
`WHEN` condition that holds exactly when the function would look further (PostgreSQL
evaluates a BEFORE trigger's WHEN just before the function would run, on the row as the
earlier triggers left it, so this is the function's own first test, without the call):

| trigger | event | WHEN | why nothing else can be refused |
|---|---|---|---|
| holds_guard_insert | INSERT | `NEW.state <> 'open'` | on INSERT the function only refuses a state other than open |
| holds_guard | UPDATE, DELETE | (always) | it stamps updated_at and checks the state machine |
| holds_money_guard_insert | INSERT | not open or interrupted, or any money column set | an open hold without money columns passes every check |
| holds_money_guard | UPDATE | (always) | |
| holds_overage_flag_guard_insert | INSERT | `NEW.overage_flagged` | a new hold may only be unflagged |
| holds_overage_flag_guard | UPDATE | the flag changes | nothing else is checked |

The functions are unchanged, and the triggers still fire in name order, so refusals and
their order are what they were. The gateway's reserve saves three function calls and
its settle one.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

UPGRADE = r"""
DROP TRIGGER holds_guard ON holds;
CREATE TRIGGER holds_guard BEFORE UPDATE OR DELETE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_guard();
CREATE TRIGGER holds_guard_insert BEFORE INSERT ON holds
  FOR EACH ROW WHEN (NEW.state <> 'open') EXECUTE FUNCTION ledger_hold_guard();

DROP TRIGGER holds_money_guard ON holds;
CREATE TRIGGER holds_money_guard BEFORE UPDATE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_money_guard();
CREATE TRIGGER holds_money_guard_insert BEFORE INSERT ON holds
  FOR EACH ROW WHEN (NEW.state NOT IN ('open', 'interrupted') OR NEW.charge IS NOT NULL
                     OR NEW.charged IS NOT NULL OR NEW.released IS NOT NULL
                     OR NEW.overage IS NOT NULL OR NEW.true_up IS NOT NULL)
  EXECUTE FUNCTION ledger_hold_money_guard();

DROP TRIGGER holds_overage_flag_guard ON holds;
CREATE TRIGGER holds_overage_flag_guard BEFORE UPDATE ON holds
  FOR EACH ROW WHEN (NEW.overage_flagged IS DISTINCT FROM OLD.overage_flagged)
  EXECUTE FUNCTION ledger_hold_overage_flag_guard();
CREATE TRIGGER holds_overage_flag_guard_insert BEFORE INSERT ON holds
  FOR EACH ROW WHEN (NEW.overage_flagged) EXECUTE FUNCTION ledger_hold_overage_flag_guard();
"""

DOWNGRADE = r"""
DROP TRIGGER holds_guard_insert ON holds;
DROP TRIGGER holds_guard ON holds;
CREATE TRIGGER holds_guard BEFORE INSERT OR UPDATE OR DELETE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_guard();
DROP TRIGGER holds_money_guard_insert ON holds;
DROP TRIGGER holds_money_guard ON holds;
CREATE TRIGGER holds_money_guard BEFORE INSERT OR UPDATE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_money_guard();
DROP TRIGGER holds_overage_flag_guard_insert ON holds;
DROP TRIGGER holds_overage_flag_guard ON holds;
CREATE TRIGGER holds_overage_flag_guard BEFORE INSERT OR UPDATE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_overage_flag_guard();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
