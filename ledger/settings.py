"""One frozen settings object, read once from `LEDGER_*` environment variables.

Every command (serve, migrate, worker, scheduler, reconcile, prices) reads the
same settings, so each works against the embedded database too. The README's
configuration table lists every variable below; keep the two in step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal

from ledger.database_url import DatabaseURL, DatabaseURLError

Role = Literal["viewer", "finance", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "finance", "admin")

DEV_GATEWAY_TOKENS = ("dev-gateway",)
DEV_ADMIN_TOKENS: tuple[tuple[str, Role], ...] = (
    ("dev-admin", "admin"),
    ("dev-finance", "finance"),
    ("dev-viewer", "viewer"),
)


# Embedded-mode defaults of the reconciliation job (see docs/workers.md).
EMBEDDED_RECONCILE_GRACE = 5
EMBEDDED_RECONCILE_INTERVAL = 5


class SettingsError(ValueError):
    """A `LEDGER_*` variable has a value that cannot be used."""


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    redis_url: str | None
    data_dir: Path
    gateway_tokens: tuple[str, ...]
    admin_tokens: tuple[tuple[str, Role], ...]
    dev_tokens: bool
    host: str
    port: int
    web_workers: int
    log_format: Literal["json", "console", "auto"]
    log_level: str
    db_pool_size: int
    db_max_overflow: int
    batch_lanes: int  # group-commit lanes per process (an account's operations always share one)
    batch_depth: int  # batches in flight per lane, each on its own connection (default 1)
    batch_pipeline: int  # with depth 1: batches in flight on the lane's one connection (pipeline mode)
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
    # Largest request body accepted (bytes); larger is 413 `payload_too_large`. A price
    # document, the largest body, is a few KiB.
    max_body_bytes: int = 1_048_576
    extra: dict[str, str] = field(default_factory=dict)
    # Key that signs finance-console session cookies. None: a random key per process
    # start (sessions end at restart and are not shared between processes).
    console_secret: str | None = None
    # Low-balance alerts (ledger.alerts). Without a webhook secret, crossings are recorded
    # but nothing is sent (the events wait, pending, until a secret is configured).
    webhook_secret: str | None = None
    alert_interval_seconds: int = 10
    alert_timeout_seconds: int = 5
    alert_max_attempts: int = 8
    alert_retry_base_seconds: int = 10
    alert_batch_size: int = 50
    # The gateway's reserve, settle and release served ahead of the framework
    # (ledger.http.fastlane); off: every request goes through Litestar's routing.
    fast_lane: bool = True

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


def _admin_tokens(raw: str | None) -> tuple[tuple[str, Role], ...]:
    pairs: list[tuple[str, Role]] = []
    for item in _list(raw):
        token, sep, role = item.rpartition(":")
        if not sep or not token:
            raise SettingsError("LEDGER_ADMIN_TOKENS entries must be token:role")
        if role not in ROLES:
            raise SettingsError(f"LEDGER_ADMIN_TOKENS role must be one of {', '.join(ROLES)}, got {role!r}")
        pairs.append((token, role))
    return tuple(pairs)


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
    gateway_tokens = _list(env.get("LEDGER_GATEWAY_TOKENS"))
    admin_tokens = _admin_tokens(env.get("LEDGER_ADMIN_TOKENS"))
    dev_tokens = False
    if database_url is None and not gateway_tokens and not admin_tokens:
        # Embedded (development) mode with nothing configured: well-known dev tokens,
        # printed at start. Never applied when a real database is configured.
        gateway_tokens, admin_tokens, dev_tokens = DEV_GATEWAY_TOKENS, DEV_ADMIN_TOKENS, True
    log_format = env.get("LEDGER_LOG_FORMAT", "auto")
    if log_format not in ("json", "console", "auto"):
        raise SettingsError("LEDGER_LOG_FORMAT must be json, console or auto")
    console_secret = env.get("LEDGER_CONSOLE_SECRET") or None
    if console_secret is not None and len(console_secret) < 32:
        raise SettingsError("LEDGER_CONSOLE_SECRET must be at least 32 characters")
    webhook_secret = env.get("LEDGER_WEBHOOK_SECRET") or None
    if webhook_secret is not None and len(webhook_secret) < 32:
        raise SettingsError("LEDGER_WEBHOOK_SECRET must be at least 32 characters")
    default_sources = str(Path(__file__).resolve().parent.parent / "pricing" / "sheets")
    return Settings(
        database_url=database_url,
        redis_url=env.get("LEDGER_REDIS_URL") or None,
        data_dir=Path(env.get("LEDGER_DATA_DIR") or ".ledger"),
        gateway_tokens=gateway_tokens,
        admin_tokens=admin_tokens,
        dev_tokens=dev_tokens,
        host=env.get("LEDGER_HOST", "127.0.0.1"),
        port=_int(env, "LEDGER_PORT", 8000, minimum=0),
        web_workers=_int(env, "LEDGER_WEB_WORKERS", 1, minimum=1),
        log_format=log_format,  # type: ignore[arg-type]
        log_level=env.get("LEDGER_LOG_LEVEL", "info").upper(),
        db_pool_size=_int(env, "LEDGER_DB_POOL_SIZE", 20, minimum=1),
        db_max_overflow=_int(env, "LEDGER_DB_MAX_OVERFLOW", 10, minimum=0),
        batch_lanes=_int(env, "LEDGER_BATCH_LANES", 1, minimum=1),
        batch_depth=_int(env, "LEDGER_BATCH_DEPTH", 1, minimum=1),
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
        service_role=env.get("LEDGER_SERVICE_ROLE") or None,
        console_secret=console_secret,
        max_body_bytes=_int(env, "LEDGER_MAX_BODY_BYTES", 1_048_576, minimum=1024),
        webhook_secret=webhook_secret,
        alert_interval_seconds=_int(env, "LEDGER_ALERT_INTERVAL_SECONDS", 10, minimum=1),
        alert_timeout_seconds=_int(env, "LEDGER_ALERT_TIMEOUT_SECONDS", 5, minimum=1),
        alert_max_attempts=_int(env, "LEDGER_ALERT_MAX_ATTEMPTS", 8, minimum=1),
        alert_retry_base_seconds=_int(env, "LEDGER_ALERT_RETRY_BASE_SECONDS", 10, minimum=0),
        alert_batch_size=_int(env, "LEDGER_ALERT_BATCH_SIZE", 50, minimum=1),
        fast_lane=_flag(env, "LEDGER_FAST_LANE", True),
    )
