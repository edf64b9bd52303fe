"""The client connection's transport, with a response head sent together with its body.

uvicorn writes a response's head and its body in two `transport.write` calls, so a
non-streamed answer cost two loopback sends and woke the client twice; a send is the largest
single cost of a proxied exchange (bench/README.md). `HeadWithBody` holds the head back and
sends it in the same call as the first piece of body written in the same turn of the event
loop; if none comes in that turn (a stream whose first event is not there yet), the head goes
on its own at the loop's next turn, so a client never waits for a head longer than before.

Every other write goes straight through, after anything held: the bytes leave in the order
they were written, and closing sends what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

MERGE_LIMIT = 64 * 1024
"""A body piece larger than this is sent after the head rather than copied behind it."""


class HeadWithBody(asyncio.Transport):
    """Wraps the client transport of one connection. The protocol calls `next_is_head()` when
    a response is complete: the next write starts the next response."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._head_next = True

    def next_is_head(self) -> None:
        self._head_next = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= MERGE_LIMIT:
                self._transport.write(held + data)
                return
            self._transport.write(held)
        elif self._head_next:
            self._head_next = False
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
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
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)
