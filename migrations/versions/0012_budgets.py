"""Budgets per (account, budget key): what a gateway's API key or project may spend per period.

- `holds.budget_key`: the key a reserve named (NULL: none; 1..128 characters, no "/", so
  the admin path can name it). Set at insert, never changed (its own trigger, so the
  hold guard of 0003 stays as it is).
- `budgets`: one row per (account_id, budget_key) that a reserve has named or finance has
  budgeted. `amount` / `period` / `alert_threshold` are the budget (NULL amount: none set,
  spend is still tracked). `held` is the sum of the key's unresolved holds; `spent` the
  lifetime charges of its settled holds; `day_*`, `week_*`, `month_*` the charges of the
  holds settled in the stored UTC window (a window that is not the current one counts as
  0: readers compare the start with the current window; writers roll it forward).
  `alerted_at`: when a settle last took the period's spend to the alert threshold.
- The database keeps the numbers honest: every amount is >= 0, a budget is > 0 and has a
  period, a threshold is a fraction in (0, 1] and needs a budget; window starts are the
  first day of their window. Rows are never deleted (removing a budget sets amount NULL).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE holds ADD COLUMN budget_key text
  CONSTRAINT holds_budget_key_syntax
    CHECK (length(budget_key) BETWEEN 1 AND 128 AND strpos(budget_key, '/') = 0);

CREATE FUNCTION ledger_hold_budget_key_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: a hold''s budget_key never changes' USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER holds_budget_key_fixed BEFORE UPDATE OF budget_key ON holds
  FOR EACH ROW WHEN (OLD.budget_key IS DISTINCT FROM NEW.budget_key)
  EXECUTE FUNCTION ledger_hold_budget_key_fixed();

CREATE TABLE budgets (
  account_id       text NOT NULL REFERENCES accounts (id),
  budget_key       text NOT NULL
                   CHECK (length(budget_key) BETWEEN 1 AND 128 AND strpos(budget_key, '/') = 0),
  amount           numeric(38, 12) CHECK (amount > 0),
  period           text CHECK (period IN ('daily', 'weekly', 'monthly', 'none')),
  alert_threshold  numeric(13, 12) CHECK (alert_threshold > 0 AND alert_threshold <= 1),
  held             numeric(38, 12) NOT NULL DEFAULT 0 CHECK (held >= 0),
  spent            numeric(38, 12) NOT NULL DEFAULT 0 CHECK (spent >= 0),
  day_start        date NOT NULL,
  day_spent        numeric(38, 12) NOT NULL DEFAULT 0 CHECK (day_spent >= 0),
  week_start       date NOT NULL CHECK (extract(isodow FROM week_start) = 1),
  week_spent       numeric(38, 12) NOT NULL DEFAULT 0 CHECK (week_spent >= 0),
  month_start      date NOT NULL CHECK (extract(day FROM month_start) = 1),
  month_spent      numeric(38, 12) NOT NULL DEFAULT 0 CHECK (month_spent >= 0),
  alerted_at       timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, budget_key),
  CONSTRAINT budgets_amount_period CHECK ((amount IS NULL) = (period IS NULL)),
  CONSTRAINT budgets_threshold_needs_amount CHECK (alert_threshold IS NULL OR amount IS NOT NULL)
);
CREATE TRIGGER budgets_never_deleted BEFORE DELETE ON budgets
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER budgets_no_truncate BEFORE TRUNCATE ON budgets
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
"""

DOWNGRADE = r"""
DROP TABLE budgets;
DROP TRIGGER holds_budget_key_fixed ON holds;
DROP FUNCTION ledger_hold_budget_key_fixed();
ALTER TABLE holds DROP COLUMN budget_key;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
