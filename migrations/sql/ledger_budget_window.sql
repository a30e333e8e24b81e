-- The first day (UTC) of the budget window `p_kind` ('day', 'week': ISO week from Monday,
-- 'month') that contains `p_at`. Inlined where it is called (a one-expression SQL function).
CREATE OR REPLACE FUNCTION ledger_budget_window(p_kind text, p_at timestamptz) RETURNS date
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE p_kind WHEN 'day' THEN CAST(timezone('UTC', p_at) AS date)
                     ELSE CAST(date_trunc(p_kind, timezone('UTC', p_at)) AS date) END
$$;
