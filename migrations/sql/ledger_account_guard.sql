-- The accounts' row guard (0001, 0011; 0024 lets the price plan change).
CREATE OR REPLACE FUNCTION ledger_account_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.balance <> 0 OR NEW.held <> 0 THEN
      RAISE EXCEPTION 'ledger: an account starts at zero; money arrives only through entries'
        USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.frozen_at IS NOT NULL AND NEW.kind = 'system' THEN
      RAISE EXCEPTION 'ledger: system accounts are never frozen' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'ledger: accounts are never deleted' USING ERRCODE = 'restrict_violation';
  END IF;
  IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.currency <> OLD.currency
     OR NEW.created_at <> OLD.created_at THEN
    RAISE EXCEPTION 'ledger: an account''s id, kind, currency and created_at never change'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF pg_trigger_depth() >= 2 THEN
    -- The entry trigger: it sets balance and held only (hot path: no further checks).
    RETURN NEW;
  END IF;
  IF NEW.balance <> OLD.balance OR NEW.held <> OLD.held THEN
    RAISE EXCEPTION 'ledger: balance and held change only through journal entries'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF OLD.kind = 'system' AND to_jsonb(NEW) IS DISTINCT FROM to_jsonb(OLD) THEN
    RAISE EXCEPTION 'ledger: system accounts are not edited' USING ERRCODE = 'restrict_violation';
  END IF;
  -- 0024: and its price plan (plan_id, plan_revision: assigned, or moved by a new revision)
  IF to_jsonb(NEW) - ARRAY['credit_limit', 'metadata', 'frozen_at', 'frozen_reason', 'review', 'plan_id',
                           'plan_revision']
     IS DISTINCT FROM to_jsonb(OLD) - ARRAY['credit_limit', 'metadata', 'frozen_at', 'frozen_reason', 'review',
                                            'plan_id', 'plan_revision'] THEN
    RAISE EXCEPTION 'ledger: only credit_limit, metadata, the freeze, the review mark and the price plan of an account may be changed'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
