"""Background jobs: reconciliation runs and the results of the other scheduled jobs.

- `reconciliation_runs`: one row per reconciliation pass. It is inserted as
  `running` in its own transaction; each batch updates its totals and items in the
  same transaction that resolves the batch's holds, so a run's row always agrees
  with the holds it committed (a run killed mid-way stays `running` with the
  totals of its committed batches). Once `finished_at` is set the row is final:
  UPDATE raises. Runs are never deleted.
- `job_runs`: the recorded result of each integrity, price-refresh and
  reconcile job execution; append-only (written once, when the job ends).
- Amounts are numeric(38, 12) columns, or decimal strings inside jsonb, never floats.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE reconciliation_runs (
  id               uuid PRIMARY KEY,
  started_at       timestamptz NOT NULL DEFAULT now(),
  finished_at      timestamptz,
  status           text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'succeeded', 'failed')),
  trigger          text NOT NULL CHECK (trigger IN ('cli', 'api', 'schedule', 'embedded')),
  actor            text NOT NULL,
  grace_seconds    integer NOT NULL CHECK (grace_seconds >= 0),
  settled_count    integer NOT NULL DEFAULT 0 CHECK (settled_count >= 0),
  released_count   integer NOT NULL DEFAULT 0 CHECK (released_count >= 0),
  skipped_count    integer NOT NULL DEFAULT 0 CHECK (skipped_count >= 0),
  charged_amount   numeric(38, 12) NOT NULL DEFAULT 0 CHECK (charged_amount >= 0),
  released_amount  numeric(38, 12) NOT NULL DEFAULT 0 CHECK (released_amount >= 0),
  by_currency      jsonb NOT NULL DEFAULT '{}'::jsonb,
  items            jsonb NOT NULL DEFAULT '[]'::jsonb,
  errors           jsonb NOT NULL DEFAULT '[]'::jsonb,
  CONSTRAINT reconciliation_runs_finished CHECK ((status = 'running') = (finished_at IS NULL))
);
CREATE INDEX reconciliation_runs_started ON reconciliation_runs (started_at DESC, id DESC);

CREATE FUNCTION ledger_run_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'ledger: reconciliation runs are never deleted' USING ERRCODE = 'restrict_violation';
  END IF;
  IF OLD.finished_at IS NOT NULL THEN
    RAISE EXCEPTION 'ledger: reconciliation run % is finished and cannot change', OLD.id
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF NEW.id <> OLD.id OR NEW.started_at <> OLD.started_at OR NEW.trigger <> OLD.trigger
     OR NEW.actor <> OLD.actor OR NEW.grace_seconds <> OLD.grace_seconds THEN
    RAISE EXCEPTION 'ledger: a reconciliation run''s id, start, trigger, actor and grace never change'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER reconciliation_runs_guard BEFORE UPDATE OR DELETE ON reconciliation_runs
  FOR EACH ROW EXECUTE FUNCTION ledger_run_guard();
CREATE TRIGGER reconciliation_runs_no_truncate BEFORE TRUNCATE ON reconciliation_runs
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

CREATE TABLE job_runs (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job          text NOT NULL CHECK (job IN ('reconcile', 'refresh_prices', 'check_integrity')),
  started_at   timestamptz NOT NULL,
  finished_at  timestamptz NOT NULL DEFAULT now(),
  ok           boolean NOT NULL,
  summary      jsonb NOT NULL DEFAULT '{}'::jsonb,
  CONSTRAINT job_runs_order CHECK (finished_at >= started_at)
);
CREATE INDEX job_runs_job ON job_runs (job, id DESC);
CREATE TRIGGER job_runs_append_only BEFORE UPDATE OR DELETE ON job_runs
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER job_runs_no_truncate BEFORE TRUNCATE ON job_runs
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
"""

DOWNGRADE = r"""
DROP TABLE job_runs;
DROP TABLE reconciliation_runs;
DROP FUNCTION ledger_run_guard();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
