-- The first day of the current period of a budget with period `p_period` (NULL for
-- period 'none' or no budget).
CREATE OR REPLACE FUNCTION ledger_budget_period_start(p_period text) RETURNS date
  LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE p_period WHEN 'daily' THEN ledger_budget_window('day', now())
                       WHEN 'weekly' THEN ledger_budget_window('week', now())
                       WHEN 'monthly' THEN ledger_budget_window('month', now()) END
$$;
