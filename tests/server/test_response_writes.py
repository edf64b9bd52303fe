"""A response's head leaves with its body (proxy/server/response_writes.py `HeadWithBody`):
one send for a non-streamed answer, the head alone at the next turn of the loop when no body
comes in the same turn, bytes in the order written, and nothing held lost on close."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.server.response_writes import MERGE_LIMIT, HeadWithBody


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


def wrapped() -> tuple[HeadWithBody, Recorder]:
    inner = Recorder()
    return HeadWithBody(inner, asyncio.get_running_loop()), inner


async def test_head_and_body_of_one_turn_go_in_one_send() -> None:
    writes, inner = wrapped()
    writes.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert inner.sends == []
    assert writes.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\n")
    writes.write(b"{}")
    assert inner.sends == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    await asyncio.sleep(0)  # the scheduled flush finds nothing held
    assert inner.sends == [b"HTTP/1.1 200 OK\r\n\r\n{}"]


async def test_a_head_without_body_in_its_turn_goes_at_the_next_turn() -> None:
    writes, inner = wrapped()
    writes.write(b"head")
    await asyncio.sleep(0)
    assert inner.sends == [b"head"]
    writes.write(b"event 1")  # a stream's later pieces go straight through
    writes.write(b"event 2")
    assert inner.sends == [b"head", b"event 1", b"event 2"]


async def test_only_the_first_write_of_each_response_is_held() -> None:
    writes, inner = wrapped()
    writes.write(b"head 1")
    writes.write(b"body 1")
    writes.write(b"more")
    writes.next_is_head()  # the response completed
    writes.write(b"head 2")
    writes.write(b"body 2")
    assert inner.sends == [b"head 1body 1", b"more", b"head 2body 2"]


async def test_a_large_body_follows_the_head_uncopied() -> None:
    writes, inner = wrapped()
    body = b"x" * (MERGE_LIMIT + 1)
    writes.write(b"head")
    writes.write(body)
    assert inner.sends == [b"head", body]


async def test_close_sends_what_is_held_first() -> None:
    writes, inner = wrapped()
    writes.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    writes.close()
    assert inner.sends == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]
    assert inner.closed
    await asyncio.sleep(0)
    assert inner.sends == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]
