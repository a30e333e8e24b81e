"""One batched path per hold operation: budgets move inside `ledger_hold_batch`.

Function bodies are read from migrations/sql/ and recorded in `sql_functions`
(`migrations.functions.install`):

- the budget rules, once, as functions that the batch and the service's locked path
  both call: `ledger_budget_window` (the first day of a day, week or month window),
  `ledger_budget_period_start` / `_end` / `_spent`, `ledger_budget_alerted_in_period`,
  `ledger_budget_hold` (a reserve checks the key's budget and joins its `held`) and
  `ledger_budget_move` (a settle, release or true-up moves it; the alert once per period);
- `ledger_active_version` (the price version in effect for a currency at a time) and
  `ledger_review_mark` (an account's review mark): one definition each, for the batch
  and the service;
- `ledger_hold_batch`: a reserve with a budget_key is checked against its budget after
  the funds (outcome 'budget'; insufficient funds wins when both refuse) and a settle or
  release of such a hold moves it (a settle's alert comes back in its `op_detail`).
  What it leaves to the service's locked path ('fallback') is a settle that live grants
  pay, a hold no longer open or interrupted (or not found), a settle whose held amount
  differs, and a release of a hold with usage. Whether an account has any grant with
  money left is read in the account-lock statement (one index probe per locked row), and
  the lapsed amount then only for those accounts, when the batch reserves; whether a
  live grant pays a settle is read with the holds, after the locks.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from alembic import op

from migrations.functions import defined_by, install_all, uninstall

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# In dependency order (a SQL function's body is checked against those it calls), each with
# the sha256 of the text this revision installs (migrations/functions.py).
FUNCTIONS = {
    "ledger_budget_window": "1351446365457626bce06700cf6fa8ee607821ce499042b20c81f60b38b9802d",
    "ledger_budget_period_start": "f19cecaccc14e67b775a6e65e7d18a53eaae3e26b33d07d485c8164ed305e39f",
    "ledger_budget_period_end": "5ce1e51e150c7fc911f3e1c1706d6628fa5d0be906df8ca3b04505f248e6d0cc",
    "ledger_budget_period_spent": "50609e36e65961b46c73772ad000ea716720be559bc406c6751f9e0c4451ae9a",
    "ledger_budget_alerted_in_period": "5bc2d94d14b5c3eefa6adb855189787dac3cac1e56c8898e2a9b60677e7550bf",
    "ledger_budget_hold": "8d351b20eed904b3308d4fc7f28c5a0a078e90734e2152a2b24e2772fb37607f",
    "ledger_budget_move": "ab637d23f28cbd368ddca2222a9a3cb75ea1f719dc0b83f5b86fdf946d864795",
    "ledger_active_version": "8a02277acf449a4fd894a5a7e3a766fc2ff93c528190abc47d683bc275d57e33",
    "ledger_review_mark": "0a75f70bb82c7cdd8a05c547fedc28b07be4d94b7510a59cdfce258cb21d9e49",
    "ledger_hold_batch": "8d33945d5baa802412b6261eecd12edc2a5d22fc772b07effe09ac44e2a6fa6a",
}


def upgrade() -> None:
    install_all(op, FUNCTIONS, revision=revision)


def downgrade() -> None:
    uninstall(
        op,
        revision=revision,
        previous={"ledger_hold_batch": defined_by("0020_grants_lapse_at_expiry.py", "ledger_hold_batch")},
    )
