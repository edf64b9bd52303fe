"""proxy/server/keepalive.py: a comment per silent interval, only between the stream's own
sends, never after its last word, and nothing left scheduled once the stream is over.

The ASGI `send` here is a recorder (tests/flows/test_stream_keepalive.py runs the same through
uvicorn): what matters is the order of the messages and which ones exist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from proxy.server.keepalive import COMMENT, Keepalive
from tests.support.waiting import until

INTERVAL = 0.05


class Recorder:
    """An ASGI send that records bodies; a body with a gate waits until the gate is set (a slow
    client, whose transport is paused)."""

    def __init__(self, gates: dict[bytes, asyncio.Event] | None = None) -> None:
        self.bodies: list[bytes] = []
        self.gates = gates or {}
        self.in_progress: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        body = message["body"]
        self.in_progress.append(body)
        if body in self.gates:
            await self.gates[body].wait()
        self.in_progress.remove(body)
        self.bodies.append(body)


async def test_a_comment_per_silent_interval_and_none_while_the_stream_sends() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        await asyncio.sleep(INTERVAL * 3.5)  # silent: about three comments
        for n in range(8):  # busy: a piece every half interval, so no comment
            yield b"data: %d\n\n" % n
            await asyncio.sleep(INTERVAL / 2)

    send = Recorder()
    await Keepalive(INTERVAL).relay(pieces(), send)
    first_busy = send.bodies.index(b"data: 0\n\n")
    assert 2 <= send.bodies[:first_busy].count(COMMENT) <= 4
    assert COMMENT not in send.bodies[first_busy:]


async def test_nothing_after_the_last_word_even_while_the_stream_winds_down() -> None:
    keepalive = Keepalive(INTERVAL)

    async def pieces() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        keepalive.end()  # the pipeline decides its last word, then sends it
        yield b"data: [DONE]\n\n"
        await asyncio.sleep(INTERVAL * 4)  # closing the upstream, saving a recording...

    send = Recorder()
    await keepalive.relay(pieces(), send)
    assert send.bodies == [b"data: 1\n\n", b"data: [DONE]\n\n"]


async def test_a_comment_goes_whole_before_the_next_piece_and_never_during_a_send() -> None:
    # The stream's first piece is held by a slow client for three intervals: no comment may
    # start meanwhile. Then a comment is held: the next piece waits for it.
    first, second = b"data: 1\n\n", b"data: 2\n\n"
    gates = {first: asyncio.Event(), COMMENT: asyncio.Event()}
    send = Recorder(gates)
    arrived = asyncio.Event()

    async def pieces() -> AsyncIterator[bytes]:
        yield first
        await arrived.wait()
        yield second

    relay = asyncio.create_task(Keepalive(INTERVAL).relay(pieces(), send))
    await asyncio.sleep(INTERVAL * 3)
    assert send.in_progress == [first] and send.bodies == []

    gates[first].set()
    await until(lambda: send.in_progress == [COMMENT], "a comment due an interval later")
    arrived.set()
    await asyncio.sleep(INTERVAL / 2)
    assert second not in send.in_progress + send.bodies  # waiting for the comment
    gates[COMMENT].set()
    await asyncio.wait_for(relay, 1)
    assert send.bodies == [first, COMMENT, second]


async def test_a_cancelled_stream_leaves_no_timer_and_no_comment_task() -> None:
    send = Recorder({COMMENT: asyncio.Event()})  # a comment in flight when the stream ends

    async def pieces() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        await asyncio.sleep(60)

    relay = asyncio.create_task(Keepalive(INTERVAL).relay(pieces(), send))
    await until(lambda: send.in_progress == [COMMENT], "a comment in flight")
    assert len(asyncio.all_tasks()) == 3  # this test, the relay, the comment
    relay.cancel()
    await asyncio.gather(relay, return_exceptions=True)
    await asyncio.sleep(INTERVAL * 3)  # a timer left behind would start another comment
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert send.bodies == [b"data: 1\n\n"]
