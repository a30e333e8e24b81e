-- An account's review mark (accounts.review, migration 0007): why, which hold, when (UTC,
-- microseconds, `Z`). The one definition: the batch marks the accounts of its flagged
-- settles with it, the locked path (admin settle, true-up, reconciler) too.
CREATE OR REPLACE FUNCTION ledger_review_mark(p_reason text, p_hold text) RETURNS jsonb
  LANGUAGE plpgsql STABLE
  AS $$
BEGIN
  RETURN jsonb_build_object('reason', p_reason, 'hold_id', p_hold,
                            'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'));
END $$;
