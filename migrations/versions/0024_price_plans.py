"""Price plans: per-account rates, materialised at publication and pinned by every hold.

- `plans` (id chosen by finance, currency, current revision), `plan_revisions` (each
  revision's canonical document and its sha256; unique per plan) and `plan_rates` (the
  effective price of a model under a plan revision at a price version: what charges).
  `plan_revisions` and `plan_rates` are append-only: UPDATE, DELETE and TRUNCATE raise
  (`ledger_refuse_change`, as for price versions and the journal), and the service role
  is granted only SELECT and INSERT on them; a `plans` row is never deleted (DELETE and
  TRUNCATE raise) and its UPDATE may only move the current revision to the next one
  (`ledger_plan_guard`: id, currency, created_at and created_by never change);
- `accounts.plan_id` / `plan_revision`: the account's current plan revision (NULL: list
  rates); `holds.plan_id` / `plan_revision`: pinned at reserve, never changed (a trigger
  refuses any change of them);
- `ledger_hold_batch`: a reserve carries the plan revision it was sized with; under the
  account lock a different current revision answers 'plan' (detail: the current one), as
  'version' does for a stale active price version, and the hold is written with it.
- `holds_plan_whole` is added NOT VALID, then validated. The validation is one
  sequential scan of `holds` and, in this migration's transaction, it still runs under
  the ACCESS EXCLUSIVE lock the ADD COLUMN took: on a large holds table the reserve and
  settle path waits for that scan, so apply 0024 at a quiet time (docs/operations.md);
- the downgrade refuses while any plan exists (it would re-price planned holds at list).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from alembic import op

from migrations.functions import defined_by, install_all, uninstall

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

FUNCTIONS = {
    "ledger_account_guard": "793442c103c01bc7d89f1e90901e94f82c3a891594e253b4ff1e6c3d630ff13e",
    "ledger_hold_batch": "657594c8aac6f88d7781b612ea5d9fd1f41c761410f274cd508ab15bfeb139b0",
    "ledger_plan_guard": "d59a35a6ac3d6ad5bfec994b0d5a0882168a1876edf62f5a242cd6a39a6238d0",
}

UPGRADE = r"""
CREATE TABLE plans (
  id          text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
  currency    char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  revision    integer NOT NULL CHECK (revision >= 1),
  created_at  timestamptz NOT NULL DEFAULT now(),
  created_by  text NOT NULL
);
CREATE TABLE plan_revisions (
  plan_id       text NOT NULL REFERENCES plans (id),
  revision      integer NOT NULL CHECK (revision >= 1),
  document      jsonb NOT NULL,
  content_hash  text NOT NULL CHECK (content_hash ~ '^[0-9a-f]{64}$'),
  created_at    timestamptz NOT NULL DEFAULT now(),
  created_by    text NOT NULL,
  reason        text NOT NULL,
  PRIMARY KEY (plan_id, revision)
);
ALTER TABLE plans ADD CONSTRAINT plans_current_revision FOREIGN KEY (id, revision)
  REFERENCES plan_revisions (plan_id, revision) DEFERRABLE INITIALLY DEFERRED;
CREATE TABLE plan_rates (
  plan_id        text NOT NULL,
  revision       integer NOT NULL,
  price_version  text NOT NULL REFERENCES price_versions (version),
  model          text NOT NULL,
  price          jsonb NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (plan_id, revision, price_version, model),
  FOREIGN KEY (plan_id, revision) REFERENCES plan_revisions (plan_id, revision)
);
CREATE TRIGGER plan_revisions_immutable BEFORE UPDATE OR DELETE ON plan_revisions
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER plan_revisions_no_truncate BEFORE TRUNCATE ON plan_revisions
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER plan_rates_immutable BEFORE UPDATE OR DELETE ON plan_rates
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER plan_rates_no_truncate BEFORE TRUNCATE ON plan_rates
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

ALTER TABLE accounts
  ADD COLUMN plan_id text,
  ADD COLUMN plan_revision integer,
  ADD CONSTRAINT accounts_plan_whole CHECK ((plan_id IS NULL) = (plan_revision IS NULL)),
  ADD CONSTRAINT accounts_plan_revision FOREIGN KEY (plan_id, plan_revision)
    REFERENCES plan_revisions (plan_id, revision);
CREATE INDEX accounts_plan ON accounts (plan_id) WHERE plan_id IS NOT NULL;

-- A hold's plan is checked by the batch against its account's (which has the foreign
-- key) under the account lock, so the hot path pays no foreign-key probe for it.
ALTER TABLE holds
  ADD COLUMN plan_id text,
  ADD COLUMN plan_revision integer,
  ADD CONSTRAINT holds_plan_whole CHECK ((plan_id IS NULL) = (plan_revision IS NULL)) NOT VALID;
ALTER TABLE holds VALIDATE CONSTRAINT holds_plan_whole;
CREATE TRIGGER holds_plan_pinned BEFORE UPDATE OF plan_id, plan_revision ON holds
  FOR EACH ROW WHEN (OLD.plan_id IS DISTINCT FROM NEW.plan_id
                     OR OLD.plan_revision IS DISTINCT FROM NEW.plan_revision)
  EXECUTE FUNCTION ledger_refuse_change();
"""

# After the functions: the plans' guard (`ledger_plan_guard`) refuses a change of a plan's
# id, currency or creation and any move of its current revision but to the next one;
# DELETE and TRUNCATE of plans are refused (accounts and holds name them).
GUARDS = r"""
CREATE TRIGGER plans_guard BEFORE UPDATE ON plans
  FOR EACH ROW EXECUTE FUNCTION ledger_plan_guard();
CREATE TRIGGER plans_no_delete BEFORE DELETE ON plans
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER plans_no_truncate BEFORE TRUNCATE ON plans
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
"""

# Dropping the plan columns would make every planned hold settle at list rates: refused
# while any plan exists (an empty database goes down and up freely).
REFUSE_WITH_PLANS = r"""
DO $refuse$
BEGIN
  IF EXISTS (SELECT 1 FROM plans) THEN
    RAISE EXCEPTION 'ledger: cannot downgrade 0024 (price plans) while a price plan exists'
      USING ERRCODE = 'object_in_use',
            HINT = 'dropping the plan columns would re-price every planned hold at list rates';
  END IF;
END $refuse$;
DROP TRIGGER plans_guard ON plans;
DROP TRIGGER plans_no_delete ON plans;
DROP TRIGGER plans_no_truncate ON plans;
"""

DOWNGRADE = r"""
DROP TRIGGER holds_plan_pinned ON holds;
ALTER TABLE holds DROP COLUMN plan_id, DROP COLUMN plan_revision;
ALTER TABLE accounts DROP COLUMN plan_id, DROP COLUMN plan_revision;
DROP TABLE plan_rates;
ALTER TABLE plans DROP CONSTRAINT plans_current_revision;
DROP TABLE plan_revisions;
DROP TABLE plans;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    install_all(op, FUNCTIONS, revision=revision)
    op.execute(GUARDS)


def downgrade() -> None:
    op.execute(REFUSE_WITH_PLANS)
    uninstall(
        op,
        revision=revision,
        previous={"ledger_account_guard": defined_by("0011_account_controls.py", "ledger_account_guard")},
    )
    op.execute(DOWNGRADE)
