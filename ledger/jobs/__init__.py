"""The recorded results of background jobs (integrity, price refresh, reconcile)."""
