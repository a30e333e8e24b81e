"""uvicorn's HTTP protocol, writing each response with one system call.

uvicorn writes a response's status line and headers, then its body, as two
`transport.write` calls, and uvloop sends each at once: two `send` system calls, two
TCP segments, and on a local network (the gateway beside the ledger) the kernel
delivers each segment to the receiver inside the sender's system call.

`CoalescingTransport` keeps what is written during one turn of the event loop and hands
it to the real transport at the end of that turn, as one write: a response written
by one task step (headers, then body) leaves in one segment. Nothing waits longer than
the current turn of the loop; `close()` writes what is kept first; everything else
(flow control, `get_extra_info`, `is_closing`) is the real transport's.
`ledger serve` passes `LedgerHttpProtocol` to uvicorn as its `http` implementation.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    __slots__ = ("_kept", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._kept: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._kept:
            self._loop.call_soon(self.flush)
        self._kept.append(bytes(data))

    def flush(self) -> None:
        if not self._kept:
            return
        data = b"".join(self._kept) if len(self._kept) > 1 else self._kept[0]
        self._kept.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class LedgerHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a `CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(coalescing)  # type: ignore[arg-type]
