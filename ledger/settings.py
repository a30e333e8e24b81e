"""One frozen settings object, read once from `LEDGER_*` environment variables.

Every command (serve, migrate, worker, scheduler, reconcile, prices) reads the
same settings, so each works against the embedded database too. The README's
configuration table and docs/configuration.md list every variable below
(tests/unit/test_docs_settings.py keeps them in step).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal

from ledger.database_url import DatabaseURL, DatabaseURLError
from ledger.tokens import (
    ROLES,
    AdminToken,
    GatewayToken,
    Role,
    SettingsError,
    admin_tokens,
    gateway_tokens,
    read_secret,
    read_value,
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

__all__ = ["ROLES", "AdminToken", "GatewayToken", "Role", "Settings", "SettingsError", "load_settings"]

DEV_GATEWAY_TOKENS = (GatewayToken("dev-gateway"),)
DEV_ADMIN_TOKENS = (
    AdminToken("dev-admin", "admin"),
    AdminToken("dev-finance", "finance"),
    AdminToken("dev-viewer", "viewer"),
)


# Embedded-mode defaults of the reconciliation job (see docs/workers.md).
EMBEDDED_RECONCILE_GRACE = 5
EMBEDDED_RECONCILE_INTERVAL = 5


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    redis_url: str | None
    data_dir: Path
    gateway_tokens: tuple[GatewayToken, ...]
    admin_tokens: tuple[AdminToken, ...]
    dev_tokens: bool
    host: str
    port: int
    web_workers: int
    log_format: Literal["json", "console", "auto"]
    log_level: str
    db_pool_size: int
    db_max_overflow: int
    batch_lanes: int  # group-commit lanes per process (an account's operations always share one)
    batch_pipeline: int  # batches in flight on a lane's one connection (pipeline mode)
    reconcile_grace_seconds: int
    reconcile_batch_size: int
    default_hold_ttl_seconds: int
    # A reserve or gateway quote may pin a superseded price version for this long after it
    # was superseded (a quote just given still holds); never a version not yet in effect.
    price_pin_grace_seconds: int
    price_sources: tuple[str, ...]
    price_refresh_max_factor: str
    # A settle whose charge exceeds this many times the hold's amount is still recorded
    # (the tokens were served) but flagged: logged at warning, counted, account marked
    # for review. Decimal string, > 0.
    max_overage_factor: str
    reconcile_cron: str
    price_refresh_cron: str
    integrity_cron: str
    # When the grant expiry job runs (UTC cron): an expired grant's remainder stays in
    # the balance (never consumed) until this posts it out.
    grant_expiry_cron: str = "* * * * *"
    # Seconds between reconcile ticks; 0 means "use reconcile_cron". Embedded mode
    # defaults to 5 so a development server resolves orphaned holds within seconds.
    reconcile_interval_seconds: int = 0
    # On SIGTERM, in-flight requests get this long to finish (then they are cancelled), and
    # embedded jobs as long again to stop: a deploy never waits on a slow client.
    shutdown_grace_seconds: int = 3
    # `ledger migrate` and `ledger grant-service-role` connect with this URL (the schema
    # owner); the service connects with `database_url`. None: both use `database_url`.
    migration_database_url: str | None = None
    # When set, `ledger migrate` grants this role the service's privileges after upgrading.
    service_role: str | None = None
    # The admin surface's lists, statements, reports and journals are read through this URL
    # (a standby: `target_session_attrs=prefer-standby`); None: everything uses `database_url`.
    # Whatever writes or reserves always uses `database_url`.
    read_database_url: str | None = None
    # With no synchronous standby behind the primary (`ledger.replication`): False keeps
    # serving (an acknowledged commit is then on one machine only); True refuses every
    # write with 503 `database_degraded` until a synchronous standby is back.
    require_sync_standby: bool = False
    # Largest request body accepted (bytes); larger is 413 `payload_too_large`. A price
    # document, the largest body, is a few KiB.
    max_body_bytes: int = 1_048_576
    extra: dict[str, str] = field(default_factory=dict)
    # Key that signs finance-console session cookies. None: derived from the identity key.
    console_secret: str | None = None
    # Key of the keyed fingerprints that identify tokens in the audit log and logs
    # (ledger.identity). None: required outside embedded mode; embedded, a random key
    # kept in `data_dir`.
    identity_secret: str | None = None
    # Where the tokens came from (the variable, or its _FILE), for start-time messages.
    gateway_tokens_source: str = "LEDGER_GATEWAY_TOKENS"
    admin_tokens_source: str = "LEDGER_ADMIN_TOKENS"
    # The console's cookies carry `Secure` (sent over https only).
    console_secure_cookie: bool = True
    # Failed authentications (401) per client address before it gets 429, and the
    # window they are counted in (ledger.http.throttle); addresses tracked at most.
    auth_failure_limit: int = 20
    auth_failure_window_seconds: int = 60
    auth_throttle_addresses: int = 10_000
    # Peers (IP addresses or networks) whose X-Forwarded-For names the client.
    trusted_proxies: tuple[Network, ...] = ()
    # Low-balance alerts (ledger.alerts). Without a webhook secret, crossings are recorded
    # but nothing is sent (the events wait, pending, until a secret is configured).
    webhook_secret: str | None = None
    alert_interval_seconds: int = 10
    alert_timeout_seconds: int = 5
    alert_max_attempts: int = 8
    alert_retry_base_seconds: int = 10
    alert_batch_size: int = 50
    # Webhook destinations (ledger.alerts.destination): https only unless allow_http; an
    # address that is not public is refused unless inside one of these networks.
    webhook_allow_http: bool = False
    webhook_allowed_networks: tuple[Network, ...] = ()
    # The gateway's reserve, settle and release served ahead of the framework
    # (ledger.holds.fastlane); off: every request goes through Litestar's routing.
    fast_lane: bool = True
    # GET /metrics reads the ledger-level figures (ledger.figures) at most once per this many
    # seconds per process; scrapes in between get the last read. 0: read at every scrape.
    metrics_cache_seconds: int = 1
    # OpenTelemetry's standard OTEL_EXPORTER_OTLP_ENDPOINT: when set, the HTTP service
    # exports traces there over OTLP/HTTP (ledger.tracing; needs the `otel` extra).
    otel_endpoint: str | None = None

    @property
    def embedded(self) -> bool:
        """No database configured: run on an embedded PostgreSQL in `data_dir`."""
        return self.database_url is None


def _int(env: dict[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise SettingsError(f"{name} must be >= {minimum}, got {value}")
    return value


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _flag(env: dict[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name} must be 1 or 0 (true/false, yes/no, on/off), got {raw!r}")


def _positive_decimal(env: dict[str, str], name: str, default: str) -> str:
    raw = env.get(name) or default
    try:
        value = Decimal(raw)
    except InvalidOperation as exc:
        raise SettingsError(f"{name} must be a decimal number, got {raw!r}") from exc
    if not value.is_finite() or value <= 0:
        raise SettingsError(f"{name} must be a positive decimal number, got {raw!r}")
    return raw


def _list(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _networks(env: dict[str, str], name: str, *, strict: bool = True) -> tuple[Network, ...]:
    """Comma-separated addresses or CIDRs; `strict` refuses host bits set (10.0.0.1/8)."""
    networks: list[Network] = []
    for item in _list(env.get(name)):
        try:
            networks.append(ipaddress.ip_network(item, strict=strict))
        except ValueError as exc:
            message = f"{name} must be comma-separated CIDRs such as 10.8.0.0/16, got {item!r}"
            raise SettingsError(message) from exc
    return tuple(networks)


def normalize_database_url(url: str, name: str = "LEDGER_DATABASE_URL") -> str:
    """Any accepted form of a database URL (libpq's, multi-host included, or SQLAlchemy's;
    see `ledger.database_url`) as the one string the settings carry, `DatabaseURL.sqlalchemy()`."""
    try:
        return DatabaseURL.parse(url, name=name).sqlalchemy()
    except DatabaseURLError as error:
        raise SettingsError(str(error)) from None


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if environ is None else environ)
    database_url = env.get("LEDGER_DATABASE_URL") or None
    if database_url is not None:
        database_url = normalize_database_url(database_url)
    gateway_source = read_value(env, "LEDGER_GATEWAY_TOKENS")
    admin_source = read_value(env, "LEDGER_ADMIN_TOKENS")
    gateway = gateway_tokens(gateway_source)
    admin = admin_tokens(admin_source)
    dev_tokens = False
    if database_url is None and not gateway and not admin:
        # Embedded (development) mode with nothing configured: well-known dev tokens,
        # printed at start. Never applied when a real database is configured.
        gateway, admin, dev_tokens = DEV_GATEWAY_TOKENS, DEV_ADMIN_TOKENS, True
    log_format = env.get("LEDGER_LOG_FORMAT", "auto")
    if log_format not in ("json", "console", "auto"):
        raise SettingsError("LEDGER_LOG_FORMAT must be json, console or auto")
    console_secret = read_secret(env, "LEDGER_CONSOLE_SECRET")
    identity_secret = read_secret(env, "LEDGER_IDENTITY_SECRET")
    webhook_secret = env.get("LEDGER_WEBHOOK_SECRET") or None
    if webhook_secret is not None and len(webhook_secret) < 32:
        raise SettingsError("LEDGER_WEBHOOK_SECRET must be at least 32 characters")
    default_sources = str(Path(__file__).resolve().parent.parent / "pricing" / "sheets")
    return Settings(
        database_url=database_url,
        redis_url=env.get("LEDGER_REDIS_URL") or None,
        data_dir=Path(env.get("LEDGER_DATA_DIR") or ".ledger"),
        gateway_tokens=gateway,
        admin_tokens=admin,
        dev_tokens=dev_tokens,
        gateway_tokens_source=gateway_source.source,
        admin_tokens_source=admin_source.source,
        host=env.get("LEDGER_HOST", "127.0.0.1"),
        port=_int(env, "LEDGER_PORT", 8000, minimum=0),
        web_workers=_int(env, "LEDGER_WEB_WORKERS", 1, minimum=1),
        log_format=log_format,  # type: ignore[arg-type]
        log_level=env.get("LEDGER_LOG_LEVEL", "info").upper(),
        db_pool_size=_int(env, "LEDGER_DB_POOL_SIZE", 20, minimum=1),
        db_max_overflow=_int(env, "LEDGER_DB_MAX_OVERFLOW", 10, minimum=0),
        batch_lanes=_int(env, "LEDGER_BATCH_LANES", 1, minimum=1),
        batch_pipeline=_int(env, "LEDGER_BATCH_PIPELINE", 2, minimum=1),
        # Embedded (development) mode waits 5 s past expiry before reconciling, so the
        # orphaned-hold demo finishes in seconds; a configured deployment waits 60 s.
        reconcile_grace_seconds=_int(
            env, "LEDGER_RECONCILE_GRACE_SECONDS", EMBEDDED_RECONCILE_GRACE if database_url is None else 60
        ),
        reconcile_batch_size=_int(env, "LEDGER_RECONCILE_BATCH_SIZE", 100, minimum=1),
        default_hold_ttl_seconds=_int(env, "LEDGER_DEFAULT_HOLD_TTL_SECONDS", 600, minimum=1),
        price_pin_grace_seconds=_int(env, "LEDGER_PRICE_PIN_GRACE_SECONDS", 3600, minimum=0),
        price_sources=_list(env.get("LEDGER_PRICE_SOURCES")) or (default_sources,),
        price_refresh_max_factor=env.get("LEDGER_PRICE_REFRESH_MAX_FACTOR", "3"),
        max_overage_factor=_positive_decimal(env, "LEDGER_MAX_OVERAGE_FACTOR", "2"),
        reconcile_cron=env.get("LEDGER_RECONCILE_CRON", "* * * * *"),
        price_refresh_cron=env.get("LEDGER_PRICE_REFRESH_CRON", "17 * * * *"),
        integrity_cron=env.get("LEDGER_INTEGRITY_CRON", "*/5 * * * *"),
        grant_expiry_cron=env.get("LEDGER_GRANT_EXPIRY_CRON", "* * * * *"),
        reconcile_interval_seconds=_int(
            env, "LEDGER_RECONCILE_INTERVAL_SECONDS", 0 if database_url else EMBEDDED_RECONCILE_INTERVAL
        ),
        shutdown_grace_seconds=_int(env, "LEDGER_SHUTDOWN_GRACE_SECONDS", 3, minimum=0),
        migration_database_url=(
            normalize_database_url(env["LEDGER_MIGRATION_DATABASE_URL"], "LEDGER_MIGRATION_DATABASE_URL")
            if env.get("LEDGER_MIGRATION_DATABASE_URL")
            else None
        ),
        read_database_url=(
            normalize_database_url(env["LEDGER_READ_DATABASE_URL"], "LEDGER_READ_DATABASE_URL")
            if env.get("LEDGER_READ_DATABASE_URL")
            else None
        ),
        require_sync_standby=_flag(env, "LEDGER_REQUIRE_SYNC_STANDBY", False),
        service_role=env.get("LEDGER_SERVICE_ROLE") or None,
        console_secret=console_secret,
        identity_secret=identity_secret,
        console_secure_cookie=_flag(env, "LEDGER_CONSOLE_SECURE_COOKIE", database_url is not None),
        auth_failure_limit=_int(env, "LEDGER_AUTH_FAILURE_LIMIT", 20, minimum=1),
        auth_failure_window_seconds=_int(env, "LEDGER_AUTH_FAILURE_WINDOW_SECONDS", 60, minimum=1),
        auth_throttle_addresses=_int(env, "LEDGER_AUTH_THROTTLE_ADDRESSES", 10_000, minimum=1),
        trusted_proxies=_networks(env, "LEDGER_TRUSTED_PROXIES", strict=False),
        max_body_bytes=_int(env, "LEDGER_MAX_BODY_BYTES", 1_048_576, minimum=1024),
        webhook_secret=webhook_secret,
        alert_interval_seconds=_int(env, "LEDGER_ALERT_INTERVAL_SECONDS", 10, minimum=1),
        alert_timeout_seconds=_int(env, "LEDGER_ALERT_TIMEOUT_SECONDS", 5, minimum=1),
        alert_max_attempts=_int(env, "LEDGER_ALERT_MAX_ATTEMPTS", 8, minimum=1),
        alert_retry_base_seconds=_int(env, "LEDGER_ALERT_RETRY_BASE_SECONDS", 10, minimum=0),
        alert_batch_size=_int(env, "LEDGER_ALERT_BATCH_SIZE", 50, minimum=1),
        webhook_allow_http=_flag(env, "LEDGER_WEBHOOK_ALLOW_HTTP", False),
        webhook_allowed_networks=_networks(env, "LEDGER_WEBHOOK_ALLOWED_NETWORKS"),
        fast_lane=_flag(env, "LEDGER_FAST_LANE", True),
        metrics_cache_seconds=_int(env, "LEDGER_METRICS_CACHE_SECONDS", 1, minimum=0),
        otel_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
    )
