"""Prometheus metrics: one registry for the process, rendered at GET /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "ledger_http_requests_total",
    "HTTP requests by route and status",
    ["method", "route", "status"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "ledger_http_request_duration_seconds",
    "HTTP request latency by route",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
MONEY_MOVEMENTS = Counter(
    "ledger_journal_transactions_total", "Journal transactions written, by kind", ["kind"], registry=REGISTRY
)
OVERAGE_FLAGGED = Counter(
    "ledger_overage_flagged_total",
    "Settles charged above LEDGER_MAX_OVERAGE_FACTOR x the hold (recorded, flagged, account marked)",
    ["currency"],
    registry=REGISTRY,
)
INTEGRITY_OK = Gauge(
    "ledger_integrity_ok", "1 when the last integrity check passed, 0 when it failed", registry=REGISTRY
)
INTEGRITY_CHECKED_AT = Gauge(
    "ledger_integrity_checked_timestamp_seconds", "When integrity was last checked", registry=REGISTRY
)
HOLDS_OPEN = Gauge("ledger_holds", "Unresolved holds by state", ["state"], registry=REGISTRY)
HOLDS_OLDEST_AGE = Gauge(
    "ledger_holds_oldest_age_seconds",
    "Age of the oldest unresolved hold by state",
    ["state"],
    registry=REGISTRY,
)
AMOUNT_HELD = Gauge(
    "ledger_amount_held",
    "Total amount held by unresolved holds, by currency",
    ["currency"],
    registry=REGISTRY,
)
RECONCILE_LAG = Gauge(
    "ledger_reconciliation_lag_seconds",
    "How long the most overdue hold has been eligible for reconciliation",
    registry=REGISTRY,
)
JOB_RUNS = Counter(
    "ledger_job_runs_total", "Background job runs by job and outcome", ["job", "outcome"], registry=REGISTRY
)


def render() -> bytes:
    return generate_latest(REGISTRY)
