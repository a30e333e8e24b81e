"""One batched path per hold operation: budgets move inside `ledger_hold_batch`.

Function bodies are read from migrations/sql/ and recorded in `sql_functions`
(`migrations.functions.install`):

- the budget rules, once, as functions that the batch and the service's locked path
  both call: `ledger_budget_window` (the first day of a day, week or month window),
  `ledger_budget_period_start` / `_end` / `_spent`, `ledger_budget_alerted_in_period`,
  `ledger_budget_hold` (a reserve checks the key's budget and joins its `held`) and
  `ledger_budget_move` (a settle, release or true-up moves it; the alert once per period);
- `ledger_hold_batch`: a reserve with a budget_key is checked against its budget after
  the funds (outcome 'budget'; insufficient funds wins when both refuse) and a settle or
  release of such a hold moves it (a settle's alert comes back in its `op_detail`), so
  only settles that live grants pay still answer 'fallback'. Whether an account has any
  grant with money left is read in the account-lock statement (one index probe per
  locked row); the lapsed and live grants are read again, under the locks, only for
  accounts that have one (0020 read them in a statement of their own in every batch).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from alembic import op

from migrations.functions import defined_by, install, uninstall

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# In dependency order (a SQL function's body is checked against those it calls).
FUNCTIONS = (
    "ledger_budget_window",
    "ledger_budget_period_start",
    "ledger_budget_period_end",
    "ledger_budget_period_spent",
    "ledger_budget_alerted_in_period",
    "ledger_budget_hold",
    "ledger_budget_move",
    "ledger_hold_batch",
)


def upgrade() -> None:
    for name in FUNCTIONS:
        install(op, name, revision=revision)


def downgrade() -> None:
    uninstall(
        op,
        revision=revision,
        previous={"ledger_hold_batch": defined_by("0020_grants_lapse_at_expiry.py", "ledger_hold_batch")},
    )
