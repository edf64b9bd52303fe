"""The client connection's transport, with what one turn of the event loop writes sent at once.

uvicorn makes a `transport.write` call per ASGI message: a response's head, then each body
piece. A non-streamed answer cost two loopback sends and woke the client twice, and a stream
one send per event even when a single upstream read brought several events; a send is the
largest single cost of a proxied exchange (bench/README.md). `OneSendPerTurn` collects the
writes of one turn of the loop and sends them together: when the response is complete (the
protocol calls `flush`), else at the start of the next turn, or at once past `FLUSH_AT` bytes.
A non-streamed answer goes in one send as soon as it is written; a stream's events that one
turn produced go together, and an event that arrives alone goes out alone, after the loop's
one pass.

The bytes leave in the order they were written, and closing sends what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

FLUSH_AT = 256 * 1024
"""Held bytes past which they go at once: a large body is not held, nor copied again."""


class OneSendPerTurn(asyncio.Transport):
    """Wraps the client transport of one connection (ClientLimitsProtocol installs it)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))  # bytes are kept as they are; a buffer is copied
        self._size += len(data)
        if self._size >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Send what is held now."""
        held = self._held
        if not held:
            return
        self._held = []
        self._size = 0
        if not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._size = 0
        self._transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)
