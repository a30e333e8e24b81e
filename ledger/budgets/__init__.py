"""Budgets per API key / project within an account."""
