-- The day after the last day of the current period of a budget with period `p_period`
-- (NULL for period 'none' or no budget).
CREATE OR REPLACE FUNCTION ledger_budget_period_end(p_period text) RETURNS date
  LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE p_period WHEN 'daily' THEN CAST(ledger_budget_window('day', now()) + interval '1 day' AS date)
                       WHEN 'weekly' THEN CAST(ledger_budget_window('week', now()) + interval '7 days' AS date)
                       WHEN 'monthly' THEN CAST(ledger_budget_window('month', now()) + interval '1 month' AS date) END
$$;
