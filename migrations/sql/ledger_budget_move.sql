-- A resolved hold moves its budget key: called under the account's lock (settle, release,
-- true-up; in the batch and on the locked path alike). No budget row: nothing to move.
--
-- `p_held_delta` leaves (or joins) `held`; `p_spent_delta` joins the lifetime `spent` and
-- the day, week and month windows of `p_spent_at`, the moment the spend belongs to (a
-- settle: now; a true-up: when the hold was resolved; NULL: now), when that moment is in the current
-- window; otherwise only `spent` (so a window's spend is exactly the final charges of the
-- key's holds resolved in it, and never negative). Every window is rolled forward to the
-- current one. The alert is recorded (`alerted_at`) when this movement takes the period's
-- spend to the threshold for the first time in the period, and `alerted` is true exactly
-- then, so the caller logs it once per period.
CREATE OR REPLACE FUNCTION ledger_budget_move(p_account text, p_key text, p_held_delta numeric,
                                              p_spent_delta numeric, p_spent_at timestamptz)
  RETURNS TABLE (account_id text, budget_key text, amount numeric, period text, alert_threshold numeric,
                 alerted boolean, period_spent numeric)
  LANGUAGE plpgsql
  SET enable_seqscan = off
  AS $$
#variable_conflict use_column
DECLARE
  b budgets;
  v_day date := ledger_budget_window('day', now());
  v_week date := ledger_budget_window('week', now());
  v_month date := ledger_budget_window('month', now());
  v_day_spent numeric;
  v_week_spent numeric;
  v_month_spent numeric;
  v_spent numeric;
  v_alerted boolean;
  v_at timestamptz := coalesce(p_spent_at, now());
BEGIN
  SELECT * INTO b FROM budgets bu WHERE bu.account_id = p_account AND bu.budget_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  v_day_spent := CASE WHEN b.day_start = v_day THEN b.day_spent ELSE 0 END
                 + CASE WHEN ledger_budget_window('day', v_at) = v_day THEN p_spent_delta ELSE 0 END;
  v_week_spent := CASE WHEN b.week_start = v_week THEN b.week_spent ELSE 0 END
                  + CASE WHEN ledger_budget_window('week', v_at) = v_week THEN p_spent_delta ELSE 0 END;
  v_month_spent := CASE WHEN b.month_start = v_month THEN b.month_spent ELSE 0 END
                   + CASE WHEN ledger_budget_window('month', v_at) = v_month THEN p_spent_delta ELSE 0 END;
  v_spent := CASE b.period WHEN 'daily' THEN v_day_spent WHEN 'weekly' THEN v_week_spent
                           WHEN 'monthly' THEN v_month_spent ELSE b.spent + p_spent_delta END;
  v_alerted := coalesce(p_spent_delta > 0 AND b.alert_threshold IS NOT NULL AND b.amount IS NOT NULL
                        AND NOT coalesce(ledger_budget_alerted_in_period(b), false)
                        AND v_spent >= b.alert_threshold * b.amount, false);
  UPDATE budgets bu
     SET held = b.held + p_held_delta, spent = b.spent + p_spent_delta, updated_at = now(),
         day_start = v_day, day_spent = v_day_spent, week_start = v_week, week_spent = v_week_spent,
         month_start = v_month, month_spent = v_month_spent,
         alerted_at = CASE WHEN v_alerted THEN now() ELSE b.alerted_at END
   WHERE bu.account_id = p_account AND bu.budget_key = p_key;
  RETURN QUERY SELECT b.account_id, b.budget_key, b.amount, b.period, b.alert_threshold, v_alerted, v_spent;
END $$;
