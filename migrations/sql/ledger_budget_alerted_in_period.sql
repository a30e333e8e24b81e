-- True when a budget row's alert threshold was reached (and recorded in `alerted_at`)
-- in the current period; for period 'none', ever since the terms were last set.
CREATE OR REPLACE FUNCTION ledger_budget_alerted_in_period(b budgets) RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT b.alerted_at IS NOT NULL
         AND (b.period = 'none' OR timezone('UTC', b.alerted_at) >= ledger_budget_period_start(b.period))
$$;
