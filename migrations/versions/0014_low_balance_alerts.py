"""Low-balance alerts: a per-account threshold, an outbox of crossings, a record of deliveries.

- `account_alerts`: at most one alert per account (threshold, webhook URL) and `below`,
  the side of the threshold the account was last seen on. `active` false: removed
  (rows are never deleted; the service role has no DELETE). No foreign key to
  `accounts` on purpose: a referenced-key check would be one more trigger on the row
  that every posting updates, and accounts are never deleted anyway (0001's guard).
- `accounts_alert_crossing`: a deferred constraint trigger on `accounts`. It is queued
  only when an update of a customer account changes `available` (balance + credit_limit
  - held, compared in the trigger's WHEN clause: no function call), and runs at commit,
  inside the money transaction: so an event exists iff the movement committed, and it
  compares the committed `available` with the threshold, never a state in the middle of
  a multi-entry posting (a settle's release leg and charge leg would otherwise cross
  twice). Per queued row it is one primary-key probe of `account_alerts`; only on a
  crossing does it flip `below` and insert an `alert_events` row. Both happen under the
  account row lock the posting holds, so concurrent postings see the flips in order.
  A failing alert must not undo a money movement: the function runs with its owner's
  privileges (SECURITY DEFINER, fixed search_path), so a service role without grants
  on the alert tables cannot break postings, and the crossing's writes run in an
  exception block that turns any error into a WARNING in the server log (the block's
  subtransaction is paid only on a crossing, never on the common path).
- `alert_events`: the outbox. `kind` 'below' (available went from >= threshold to <
  threshold) or 'above' (back to >= threshold: the alert is re-armed). Amounts of
  `available` are unconstrained numerics (balance + credit_limit can exceed 38 digits).
  Only the delivery columns (`status`, `attempts`, `next_attempt_at`, `finished_at`)
  change, and only while the event is `pending`; a finished event never changes and no
  event is deleted.
- `alert_deliveries`: one row per HTTP attempt, with the URL it went to (the alert's
  current URL, so a corrected URL applies to pending events; the event keeps the URL
  configured at the crossing); append-only (no UPDATE, DELETE or TRUNCATE).
- `job_runs.job` also admits `deliver_alerts` (the delivery job's non-idle runs).

Revision ID: 0014
Revises: 0011
Create Date: 2026-12-03
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE job_runs DROP CONSTRAINT job_runs_job_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_job_check
  CHECK (job IN ('reconcile', 'refresh_prices', 'check_integrity', 'expire_grants', 'deliver_alerts'));

CREATE TABLE account_alerts (
  account_id  text PRIMARY KEY,
  threshold   numeric(38, 12) NOT NULL,
  webhook_url text NOT NULL CHECK (webhook_url ~ '^https?://[^[:space:]]+$' AND length(webhook_url) <= 2048),
  below       boolean NOT NULL,
  active      boolean NOT NULL DEFAULT true,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE alert_events (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id         uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
  account_id       text NOT NULL,
  kind             text NOT NULL CHECK (kind IN ('below', 'above')),
  threshold        numeric(38, 12) NOT NULL,
  available_before numeric NOT NULL,
  available_after  numeric NOT NULL,
  currency         char(3) NOT NULL,
  webhook_url      text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  status           text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'delivered', 'failed', 'cancelled')),
  attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt_at  timestamptz NOT NULL DEFAULT now(),
  finished_at      timestamptz,
  CONSTRAINT alert_events_finished CHECK ((status = 'pending') = (finished_at IS NULL))
);
CREATE INDEX alert_events_due ON alert_events (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX alert_events_account ON alert_events (account_id, id);

CREATE TABLE alert_deliveries (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id    bigint NOT NULL REFERENCES alert_events (id),
  attempt     integer NOT NULL CHECK (attempt >= 1),
  at          timestamptz NOT NULL DEFAULT now(),
  webhook_url text NOT NULL,
  status_code integer,
  error       text,
  delivered   boolean NOT NULL,
  CONSTRAINT alert_deliveries_attempt UNIQUE (event_id, attempt)
);

CREATE FUNCTION ledger_alert_crossing() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  alert record;
  now_available numeric;
  now_below boolean;
BEGIN
  SELECT threshold, webhook_url, below INTO alert
    FROM account_alerts WHERE account_id = NEW.id AND active;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  -- The committed state: later updates of this row in the same transaction are included.
  SELECT balance + credit_limit - held INTO now_available FROM accounts WHERE id = NEW.id;
  now_below := now_available < alert.threshold;
  IF now_below = alert.below THEN
    RETURN NULL;
  END IF;
  BEGIN
    UPDATE account_alerts SET below = now_below WHERE account_id = NEW.id;
    -- The first queued row event of this account in the transaction is the one that flips,
    -- so its OLD is the account as it was before the transaction.
    INSERT INTO alert_events (account_id, kind, threshold, available_before, available_after,
                              currency, webhook_url)
    VALUES (NEW.id, CASE WHEN now_below THEN 'below' ELSE 'above' END, alert.threshold,
            OLD.balance + OLD.credit_limit - OLD.held, now_available, NEW.currency, alert.webhook_url);
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'ledger: low-balance alert for account % not recorded: % (%)', NEW.id, SQLERRM, SQLSTATE;
  END;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER accounts_alert_crossing AFTER UPDATE OF balance, held, credit_limit ON accounts
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (NEW.kind = 'customer'
        AND NEW.balance + NEW.credit_limit - NEW.held <> OLD.balance + OLD.credit_limit - OLD.held)
  EXECUTE FUNCTION ledger_alert_crossing();

CREATE FUNCTION ledger_alert_event_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'ledger: alert events are never deleted' USING ERRCODE = 'restrict_violation';
  END IF;
  IF OLD.status <> 'pending' THEN
    RAISE EXCEPTION 'ledger: alert event % is %: it no longer changes', OLD.id, OLD.status
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF to_jsonb(NEW) - ARRAY['status', 'attempts', 'next_attempt_at', 'finished_at']
     IS DISTINCT FROM to_jsonb(OLD) - ARRAY['status', 'attempts', 'next_attempt_at', 'finished_at'] THEN
    RAISE EXCEPTION 'ledger: only the delivery state of an alert event changes'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF NEW.attempts < OLD.attempts THEN
    RAISE EXCEPTION 'ledger: an alert event''s attempts only grow' USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER alert_events_guard BEFORE UPDATE OR DELETE ON alert_events
  FOR EACH ROW EXECUTE FUNCTION ledger_alert_event_guard();

CREATE FUNCTION ledger_alert_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: % refuses %: alert records are kept as written', TG_TABLE_NAME, TG_OP
    USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER alert_deliveries_append_only BEFORE UPDATE OR DELETE ON alert_deliveries
  FOR EACH ROW EXECUTE FUNCTION ledger_alert_append_only();
CREATE TRIGGER alert_deliveries_no_truncate BEFORE TRUNCATE ON alert_deliveries
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_alert_append_only();
CREATE TRIGGER alert_events_no_truncate BEFORE TRUNCATE ON alert_events
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_alert_append_only();
CREATE TRIGGER account_alerts_no_delete BEFORE DELETE OR TRUNCATE ON account_alerts
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_alert_append_only();
"""

DOWNGRADE = r"""
DROP TRIGGER accounts_alert_crossing ON accounts;
DROP FUNCTION ledger_alert_crossing();
DROP TABLE alert_deliveries;
DROP TABLE alert_events;
DROP TABLE account_alerts;
DROP FUNCTION ledger_alert_append_only();
DROP FUNCTION ledger_alert_event_guard();
-- job_runs is append-only: recorded deliver_alerts runs stay; the old check holds for new rows.
ALTER TABLE job_runs DROP CONSTRAINT job_runs_job_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_job_check
  CHECK (job IN ('reconcile', 'refresh_prices', 'check_integrity', 'expire_grants')) NOT VALID;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
