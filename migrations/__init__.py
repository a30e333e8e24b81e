"""Alembic migrations. The invariants the database enforces live here as SQL."""
