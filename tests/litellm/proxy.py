"""A real LiteLLM proxy (`litellm --config ... --port N`) for the ledger hook's tests and bench.

`Proxy(config, env)` writes `config` as the proxy's config.yaml in a folder of its own,
starts `litellm` (the venv's console script beside this interpreter) on a free port, offline:
no DATABASE_URL, telemetry off, LiteLLM's bundled cost map (no download). It waits for
`/health/liveliness` and stops the process (SIGTERM, then kill) on exit. `log` is its output.

`Upstream` is a fake OpenAI chat endpoint on a thread that counts the requests it gets, so a
test can show that a refused request never went upstream. Asked to stream, it sends output
and then drops the connection (with the usage chunk first when the model is
`break-after-usage`): a stream that breaks after output.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

MASTER_KEY = "sk-ledger-test-master-key-0c8e1f6a"
# The environment a proxy gets so it never reaches the network on its own.
OFFLINE_ENV = {
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
    "LITELLM_LOG": "ERROR",
    "NO_DOCS": "True",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def litellm_command() -> str:
    """The `litellm` console script of this interpreter's environment."""
    return str(Path(sys.executable).with_name("litellm"))


class Proxy:
    """One LiteLLM proxy process on a free port; a context manager."""

    def __init__(self, config: dict[str, Any], env: dict[str, str], *, start_timeout: float = 90) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="litellm-proxy-"))
        self.config_path = self.folder / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = self.folder / "proxy.log"
        self.start_timeout = start_timeout
        full = {**os.environ, **OFFLINE_ENV, **env}
        for name in ("DATABASE_URL", "DIRECT_URL", "REDIS_HOST", "REDIS_URL"):
            full.pop(name, None)
        self._env = full
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Proxy:
        log = open(self.log_path, "wb")
        self._proc = subprocess.Popen(
            [
                litellm_command(),
                "--config",
                str(self.config_path),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            cwd=self.folder,
            env=self._env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the LiteLLM proxy exited {self._proc.returncode}:\n{self.log()[-4000:]}")
            try:
                if httpx.get(self.base + "/health/liveliness", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the LiteLLM proxy did not start in {self.start_timeout}s:\n{self.log()[-4000:]}")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Upstream:
    """A fake OpenAI `/v1/chat/completions` that answers `usage` and counts its requests."""

    def __init__(self, usage: dict[str, Any]) -> None:
        self.requests = 0
        self.usage = usage
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                request = json.loads(self.rfile.read(length) or b"{}")
                upstream.requests += 1
                if request.get("stream"):
                    self._broken_stream(with_usage=request.get("model") == "break-after-usage")
                    return
                body = json.dumps(
                    {
                        "id": "chatcmpl-upstream",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": "gpt-4o",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "from upstream"},
                            }
                        ],
                        "usage": upstream.usage,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _broken_stream(self, *, with_usage: bool) -> None:
                """Two content chunks (and the usage chunk, if asked), then the connection drops
                without the stream's end: a stream that breaks after output."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                chunks: list[dict[str, Any]] = [
                    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": part}}]}
                    for part in ("par", "tial")
                ]
                if with_usage:
                    chunks.append({"choices": [], "usage": upstream.usage})
                for chunk in chunks:
                    event = {
                        "id": "chatcmpl-broken",
                        "object": "chat.completion.chunk",
                        "created": int(time.time()),
                        "model": "gpt-4o",
                        **chunk,
                    }
                    data = f"data: {json.dumps(event)}\n\n".encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.05)
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Upstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
