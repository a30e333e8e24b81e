"""The double-entry journal: transactions of balanced, append-only entries.

System accounts (per currency): `system:funding:<CUR>` (money that entered from
outside, the counterpart of deposits), `system:adjustments:<CUR>` (counterpart of
adjustments), and `system:revenue:<CUR>:<NN>`, 16 revenue shards. System accounts
have no cached balance row that postings update: their balances are sums of their
entries, so no single row is written (or locked) by every charge.
"""
