"""`ledger serve` as a real subprocess on a free port: the one way the tests start the service.

Used by the shutdown, multi-process metrics, hold concurrency, client, browser and contract tests.
The server runs with the project's interpreter: `LEDGER_SERVER_PYTHON` when a process outside
the project's venv starts it (the client's wheel test: tests/client/test_client_wheel.py),
else this process's own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

ROOT = Path(__file__).resolve().parents[1]


def server_python() -> str:
    """The interpreter that runs `ledger serve`: the project's venv, never a client-only one."""
    return os.environ.get("LEDGER_SERVER_PYTHON") or sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """One `ledger serve` process; `stop()` terminates it if it is still running.

    The process gets this process's environment, then `env` on top, less the variables
    named in `drop` (by default Redis, which the API does not need, and a multi-process
    metrics folder). `args` go after `serve --port N`. `stop_timeout`: how long `stop()`
    waits after SIGTERM before it kills.
    """

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        *args: str,
        drop: tuple[str, ...] = ("LEDGER_REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"),
        stop_timeout: float = 15,
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.stop_timeout = stop_timeout
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115
        full = {**os.environ, **env}
        for name in drop:
            full.pop(name, None)
        self.proc = subprocess.Popen(
            [server_python(), "-m", "ledger.cli", "serve", "--port", str(self.port), *args],
            cwd=ROOT,
            env=full,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ledger serve exited early: {self.log()}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ledger serve did not become ready: {self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def assert_no_tracebacks(self) -> None:
        """Fails if the log has a line that starts a Python traceback."""
        errors = [line for line in self.log().splitlines() if "Traceback" in line]
        assert not errors, f"the server logged {len(errors)} tracebacks; see {self.log_path}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
