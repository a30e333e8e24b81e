"""Integrity: recompute every account from the journal and prove the ledger sums to zero."""
