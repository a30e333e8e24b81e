"""Holds: reservations of credit, their lifecycle, and the state machine the database enforces.

- states: open -> settled | released; open -> interrupted -> settled | released;
  a hold resolved by the reconciler or an admin may later be trued up by the
  gateway's authoritative settle (released -> settled, or a new charge on settled),
  but a hold the gateway itself released never becomes settled;
- the reserved `amount` is non-negative and, like the pinned `price_version`, the
  account, model and reservation breakdown, never changes after insert;
- holds are never deleted; (account_id, idempotency_key) is unique.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE holds (
  id               uuid PRIMARY KEY,
  account_id       text NOT NULL REFERENCES accounts (id),
  idempotency_key  text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
  request_hash     text NOT NULL,
  state            text NOT NULL CHECK (state IN ('open', 'interrupted', 'settled', 'released')),
  model            text NOT NULL,
  price_version    text NOT NULL REFERENCES price_versions (version),
  currency         char(3) NOT NULL,
  amount           numeric(38, 12) NOT NULL CHECK (amount >= 0),
  reservation      jsonb NOT NULL,
  ttl_seconds      integer NOT NULL CHECK (ttl_seconds BETWEEN 1 AND 86400),
  expires_at       timestamptz NOT NULL,
  metadata         jsonb NOT NULL DEFAULT '{}'::jsonb,
  usage            jsonb,
  gateway_usage    jsonb,
  charge           jsonb,
  charged          numeric(38, 12) CHECK (charged >= 0),
  released         numeric(38, 12) CHECK (released >= 0),
  overage          numeric(38, 12) CHECK (overage >= 0),
  true_up          numeric(38, 12),
  resolved_by      text CHECK (resolved_by IN ('gateway', 'reconciler', 'admin')),
  resolved_reason  text,
  interrupted_at   timestamptz,
  resolved_at      timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT holds_account_key UNIQUE (account_id, idempotency_key),
  CONSTRAINT holds_resolution CHECK (
    (state IN ('open', 'interrupted')) = (resolved_by IS NULL AND resolved_at IS NULL)),
  CONSTRAINT holds_settled_has_charge CHECK (state <> 'settled' OR (charge IS NOT NULL AND charged IS NOT NULL))
);
CREATE INDEX holds_open_expiry ON holds (expires_at) WHERE state = 'open';
CREATE INDEX holds_interrupted_since ON holds (interrupted_at) WHERE state = 'interrupted';
CREATE INDEX holds_state_id ON holds (state, id);
CREATE INDEX holds_account_id ON holds (account_id, id);

CREATE FUNCTION ledger_hold_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.state <> 'open' THEN
      RAISE EXCEPTION 'ledger: a hold starts open' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'ledger: holds are never deleted' USING ERRCODE = 'restrict_violation';
  END IF;
  IF NEW.id <> OLD.id OR NEW.account_id <> OLD.account_id OR NEW.idempotency_key <> OLD.idempotency_key
     OR NEW.request_hash <> OLD.request_hash OR NEW.model <> OLD.model
     OR NEW.price_version <> OLD.price_version OR NEW.currency <> OLD.currency
     OR NEW.amount <> OLD.amount OR NEW.reservation <> OLD.reservation OR NEW.created_at <> OLD.created_at THEN
    RAISE EXCEPTION 'ledger: a hold''s account, key, model, price version and amount never change'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF NOT (
       (OLD.state = 'open' AND NEW.state IN ('open', 'interrupted', 'settled', 'released'))
    OR (OLD.state = 'interrupted' AND NEW.state IN ('interrupted', 'settled', 'released'))
    OR (OLD.state = 'settled' AND NEW.state = 'settled')
    OR (OLD.state = 'released' AND NEW.state = 'released')
    OR (OLD.state = 'released' AND NEW.state = 'settled' AND OLD.resolved_by <> 'gateway')
  ) THEN
    RAISE EXCEPTION 'ledger: hold % cannot go from % to %', OLD.id, OLD.state, NEW.state
      USING ERRCODE = 'check_violation';
  END IF;
  IF OLD.state IN ('settled', 'released') AND NEW.resolved_by IS DISTINCT FROM OLD.resolved_by THEN
    RAISE EXCEPTION 'ledger: who resolved a hold never changes' USING ERRCODE = 'restrict_violation';
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END $$;
CREATE TRIGGER holds_guard BEFORE INSERT OR UPDATE OR DELETE ON holds
  FOR EACH ROW EXECUTE FUNCTION ledger_hold_guard();
CREATE TRIGGER holds_no_truncate BEFORE TRUNCATE ON holds
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

ALTER TABLE journal_transactions
  ADD CONSTRAINT journal_transactions_hold FOREIGN KEY (hold_id) REFERENCES holds (id);
"""

DOWNGRADE = r"""
ALTER TABLE journal_transactions DROP CONSTRAINT journal_transactions_hold;
DROP TABLE holds;
DROP FUNCTION ledger_hold_guard();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
