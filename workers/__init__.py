"""Background jobs: the Dramatiq broker and actors, the leader-elected scheduler, embedded mode.

Dependency direction: `workers` imports `ledger` (its services and repositories);
`ledger` never imports `workers`, except `ledger.bootstrap`, which starts the
embedded jobs for `ledger serve` in embedded mode, and `ledger.cli`, which runs
the worker and scheduler commands. Nothing on the hot path (holds, accounts)
imports this package or talks to Redis.
"""
