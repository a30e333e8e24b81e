"""`ledger.http.server`: a response leaves in one write, nothing is held past the loop's turn.

The unit tests drive `CoalescingTransport` over a recording transport on a real event
loop; the last test serves a real uvicorn with `LedgerHttpProtocol` and reads the raw
bytes on a socket: keep-alive, a large streamed body, and `Connection: close`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import uvicorn

from ledger.http.server import CoalescingTransport, LedgerHttpProtocol
from tests.serving import free_port


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default


def run(scenario: Any) -> Any:
    return asyncio.run(scenario())


def test_writes_of_one_turn_leave_as_one() -> None:
    async def scenario() -> Recording:
        real = Recording()
        t = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        t.write(b"")  # nothing to write: no effect
        t.write(b"ok")
        assert real.writes == []  # not before the turn ends
        await asyncio.sleep(0)
        assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
        t.write(bytearray(b"next"))
        await asyncio.sleep(0)
        assert real.writes[-1] == b"next"
        return real

    assert len(run(scenario).writes) == 2


def test_close_writes_what_is_kept_first_and_later_writes_are_dropped() -> None:
    async def scenario() -> Recording:
        real = Recording()
        t = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"last words")
        t.close()
        assert real.writes == [b"last words"] and real.closed
        assert t.is_closing()  # the real transport's answer
        assert t.get_extra_info("peername") == ("127.0.0.1", 1234)
        t.write(b"too late")
        await asyncio.sleep(0)  # the scheduled flush finds the transport closing
        return real

    assert run(scenario).writes == [b"last words"]


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await receive()
    if scope["path"] == "/big":
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        for i in range(50):  # chunked: 50 parts of 10 KiB
            await send(
                {"type": "http.response.body", "body": bytes([65 + i % 26]) * 10240, "more_body": True}
            )
        await send({"type": "http.response.body", "body": b""})
        return
    body = scope["path"].encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def read_response(sock: socket.socket, buffer: bytearray) -> tuple[bytes, bytes]:
    """One response from `sock` (content-length or chunked), leaving what follows in `buffer`."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the headers"
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    lines = head.split(b"\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines[1:])}
    if b"content-length" in headers:
        size = int(headers[b"content-length"])
        while len(buffer) < size:
            buffer += sock.recv(65536)
        body = bytes(buffer[:size])
        del buffer[:size]
        return head, body
    body = bytearray()
    while True:
        while b"\r\n" not in buffer:
            buffer += sock.recv(65536)
        size_line, _, _ = bytes(buffer).partition(b"\r\n")
        size = int(size_line, 16)
        while len(buffer) < len(size_line) + 2 + size + 2:
            buffer += sock.recv(65536)
        body += buffer[len(size_line) + 2 : len(size_line) + 2 + size]
        del buffer[: len(size_line) + 2 + size + 2]
        if size == 0:
            return head, bytes(body)


def test_a_real_server_keeps_alive_streams_and_closes() -> None:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=LedgerHttpProtocol, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert server.started
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            buffer = bytearray()
            # two requests in one write (pipelined), then one more: keep-alive answers all
            sock.sendall(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock, buffer)[1] == b"/one"
            assert read_response(sock, buffer)[1] == b"/two"
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            head, body = read_response(sock, buffer)
            assert b"transfer-encoding: chunked" in head.lower()
            assert len(body) == 50 * 10240 and body[:1] == b"A" and body[-1:] == bytes([65 + 49 % 26])
            sock.sendall(b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head, body = read_response(sock, buffer)
            assert body == b"/last" and b"connection: close" in head.lower()
            assert sock.recv(100) == b""  # then the server closed: what it kept was written first
    finally:
        server.should_exit = True
        thread.join(timeout=10)
