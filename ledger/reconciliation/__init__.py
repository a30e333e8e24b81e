"""Reconciliation of orphaned holds: expired open holds and interrupted holds past their grace."""
