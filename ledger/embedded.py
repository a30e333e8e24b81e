"""The embedded PostgreSQL (pgserver) used when no LEDGER_DATABASE_URL is configured.

Its data lives in `<LEDGER_DATA_DIR>/pg`; several processes (serve, reconcile,
prices ...) share one running server: `pgserver.get_server` hands a second
process the server the first one started. The Unix socket lives in the data
folder, so the folder's absolute path must stay short (~100 bytes for sockets).
"""

from __future__ import annotations

import os
import warnings
from urllib.parse import quote

from ledger.settings import Settings

DATABASE = "ledger"


def embedded_database_url(settings: Settings) -> str:
    """Start (or join) the embedded server, create the `ledger` database if needed, return its URL."""
    warnings.filterwarnings("ignore", module="platformdirs")
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    import pgserver

    folder = (settings.data_dir / "pg").resolve()
    folder.parent.mkdir(parents=True, exist_ok=True)
    if len(str(folder)) > 90:
        raise SystemExit(f"LEDGER_DATA_DIR resolves to a path too long for a Unix socket: {folder}")
    server = pgserver.get_server(folder, cleanup_mode=None)  # type: ignore[attr-defined]
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "1 row" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE};")
    return f"postgresql+psycopg://postgres@/{DATABASE}?host={quote(str(folder))}"


def stop_embedded(settings: Settings) -> str:
    """Stop the embedded PostgreSQL of `LEDGER_DATA_DIR` (it outlives `ledger serve` on purpose,
    so that `ledger reconcile` and friends can join it)."""
    warnings.filterwarnings("ignore", module="platformdirs")
    folder = (settings.data_dir / "pg").resolve()
    if not (folder / "postmaster.pid").exists():
        return f"no embedded PostgreSQL is running in {folder}"
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

    user = "pgserver" if os.geteuid() == 0 else None  # pgserver runs the server as this user under root
    pg_ctl(["-w", "stop"], pgdata=folder, user=user, timeout=60)
    handles = folder / ".handle_pids.json"
    if handles.exists():
        handles.unlink()
    return f"stopped the embedded PostgreSQL in {folder}"
