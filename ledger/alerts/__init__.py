"""Low-balance alerts: per-account thresholds, the crossing outbox, signed webhook delivery."""
