-- The plans' row guard (0024): a plan's id, currency, created_at and created_by never
-- change, and its current revision only moves to the next one (each revision published
-- becomes current at once, so it never goes back or skips). DELETE and TRUNCATE are
-- refused by `ledger_refuse_change` (accounts and holds name the plan).
CREATE OR REPLACE FUNCTION ledger_plan_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.id <> OLD.id OR NEW.currency <> OLD.currency OR NEW.created_at <> OLD.created_at
     OR NEW.created_by <> OLD.created_by THEN
    RAISE EXCEPTION 'ledger: a plan''s id, currency, created_at and created_by never change'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF NEW.revision <> OLD.revision AND NEW.revision <> OLD.revision + 1 THEN
    RAISE EXCEPTION 'ledger: a plan''s current revision only moves to the next one (% to %)',
      OLD.revision, NEW.revision
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
