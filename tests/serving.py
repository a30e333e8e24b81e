"""`ledger serve` as a real subprocess, for the shutdown and multi-process metrics tests."""

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """One `ledger serve` process; `stop()` terminates it if it is still running."""

    def __init__(self, env: dict[str, str], log_path: Path, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115
        full = {**os.environ, **env}
        full.pop("LEDGER_REDIS_URL", None)  # the API needs no Redis
        full.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledger.cli", "serve", "--port", str(self.port), *args],
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
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
