"""Price versions in the ledger: publish, list, look up the active one, and quote."""
