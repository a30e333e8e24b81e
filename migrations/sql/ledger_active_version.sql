-- The price version in effect for a currency at `p_at` (default now()): the latest
-- effective_at at or before it, ties broken by the later publication (id); NULL when none
-- is. The one definition: the batch re-checks a reserve's version with it under the
-- account lock, the service reads it to size a reserve, quote or read prices as of a time.
CREATE OR REPLACE FUNCTION ledger_active_version(p_currency text, p_at timestamptz DEFAULT now()) RETURNS text
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
  AS $$
BEGIN
  RETURN (SELECT pv.version FROM price_versions pv
           WHERE pv.currency = p_currency AND pv.effective_at <= p_at
           ORDER BY pv.effective_at DESC, pv.id DESC LIMIT 1);
END $$;
