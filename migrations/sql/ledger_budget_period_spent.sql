-- What a budget row's period has spent so far: the charges of the current day, week or
-- month window (a stored window that is not the current one counts as 0), or the
-- lifetime `spent` for period 'none' (and for a row without a budget).
CREATE OR REPLACE FUNCTION ledger_budget_period_spent(b budgets) RETURNS numeric
  LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE b.period
           WHEN 'daily' THEN CASE WHEN b.day_start = ledger_budget_window('day', now()) THEN b.day_spent ELSE 0 END
           WHEN 'weekly' THEN CASE WHEN b.week_start = ledger_budget_window('week', now()) THEN b.week_spent ELSE 0 END
           WHEN 'monthly' THEN CASE WHEN b.month_start = ledger_budget_window('month', now()) THEN b.month_spent ELSE 0 END
           ELSE b.spent END
$$;
