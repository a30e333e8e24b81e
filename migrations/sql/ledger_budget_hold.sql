-- A reserve's hold joins its budget key: called under the account's lock (every write to
-- a budget row happens under its account's lock, so the account lock alone serializes a
-- key's budget, and taking the budget row's lock after it never deadlocks).
--
-- Locks the key's budget row and checks that the period's spend + the key's holds + this
-- hold stay within the budget (no row, or no amount set: unlimited). Refused: nothing is
-- written and the answer is what the 402 `budget_exceeded` says (budget, spent, held,
-- period_start, period_end). Allowed: the amount is added to the row's `held` (the row is
-- made on first use, with the current windows) and the answer is NULL.
CREATE OR REPLACE FUNCTION ledger_budget_hold(p_account text, p_key text, p_amount numeric) RETURNS jsonb
  LANGUAGE plpgsql
  SET enable_seqscan = off
  AS $$
DECLARE
  b budgets;
  v_spent numeric;
BEGIN
  SELECT * INTO b FROM budgets bu WHERE bu.account_id = p_account AND bu.budget_key = p_key FOR UPDATE;
  IF FOUND THEN
    v_spent := ledger_budget_period_spent(b);
    IF b.amount IS NOT NULL AND v_spent + b.held + p_amount > b.amount THEN
      RETURN jsonb_build_object('budget', CAST(b.amount AS text), 'spent', CAST(v_spent AS text),
                                'held', CAST(b.held AS text),
                                'period_start', ledger_budget_period_start(b.period),
                                'period_end', ledger_budget_period_end(b.period));
    END IF;
    UPDATE budgets bu SET held = bu.held + p_amount, updated_at = now()
     WHERE bu.account_id = p_account AND bu.budget_key = p_key;
  ELSE
    INSERT INTO budgets (account_id, budget_key, held, day_start, week_start, month_start)
    VALUES (p_account, p_key, p_amount, ledger_budget_window('day', now()), ledger_budget_window('week', now()),
            ledger_budget_window('month', now()))
    ON CONFLICT (account_id, budget_key) DO UPDATE SET held = budgets.held + EXCLUDED.held, updated_at = now();
  END IF;
  RETURN NULL;
END $$;
