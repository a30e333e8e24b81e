"""Customer accounts: creation, balances, deposits, adjustments and their journal."""
