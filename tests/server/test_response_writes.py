"""What one turn of the event loop writes to a client goes in one send
(proxy/server/response_writes.py `OneSendPerTurn`): a head with its body, a stream's events of
one turn together, a complete response at once, bytes in the order written, nothing held lost
on close, and nothing held past the loop's next turn."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.server.response_writes import FLUSH_AT, OneSendPerTurn


class Recorder(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sends: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.sends.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0


def wrapped() -> tuple[OneSendPerTurn, Recorder]:
    inner = Recorder()
    return OneSendPerTurn(inner, asyncio.get_running_loop()), inner


async def test_the_writes_of_one_turn_go_in_one_send_at_the_next() -> None:
    writes, inner = wrapped()
    writes.write(b"HTTP/1.1 200 OK\r\n\r\n")
    writes.write(b"event 1")
    assert inner.sends == []
    assert writes.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nevent 1")
    await asyncio.sleep(0)
    assert inner.sends == [b"HTTP/1.1 200 OK\r\n\r\nevent 1"]
    writes.write(b"event 2")  # alone in its turn: alone in its send
    await asyncio.sleep(0)
    assert inner.sends == [b"HTTP/1.1 200 OK\r\n\r\nevent 1", b"event 2"]


async def test_a_complete_response_goes_at_once() -> None:
    writes, inner = wrapped()
    writes.write(b"head")
    writes.write(bytearray(b"{}"))  # a buffer is copied, not kept
    writes.flush()  # what the protocol calls when the response is complete
    assert inner.sends == [b"head{}"]
    await asyncio.sleep(0)  # the scheduled flush finds nothing held
    assert inner.sends == [b"head{}"]


async def test_past_the_limit_the_held_bytes_go_at_once() -> None:
    writes, inner = wrapped()
    writes.write(b"head")
    body = b"x" * FLUSH_AT
    writes.write(body)
    assert inner.sends == [b"head" + body]
    writes.write(b"")  # nothing to send, nothing scheduled
    await asyncio.sleep(0)
    assert inner.sends == [b"head" + body]


async def test_close_sends_what_is_held_first() -> None:
    writes, inner = wrapped()
    writes.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    writes.close()
    assert inner.sends == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]
    assert inner.closed
    await asyncio.sleep(0)
    assert inner.sends == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]


async def test_nothing_is_sent_on_a_connection_already_closing() -> None:
    writes, inner = wrapped()
    writes.write(b"late")
    inner.closed = True  # the client went away meanwhile
    await asyncio.sleep(0)
    assert inner.sends == []
