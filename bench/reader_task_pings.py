"""The alternative to the keepalive timer that bench/keepalive_cost.py measures it against (the
proxy once ran it for the fronts): an upstream body's pieces, with a marker whenever the
upstream stays silent too long.

A stream that must say something while its upstream thinks (Anthropic's `ping`) has to wait for
the next piece and for a timer at once. A task and an `asyncio.wait` per piece cost about 40 µs
each, more than everything else the Messages front does with an event; here one task reads the
whole body, and each wait is one future and one timer handle. The reader runs at most `AHEAD`
pieces ahead of the consumer, so a slow client still holds the upstream back.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator

AHEAD = 16


def _wake(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


async def with_pings(
    source: AsyncIterator[bytes], interval: float, ahead: int = AHEAD
) -> AsyncGenerator[bytes | None]:
    """`source`'s pieces in order, and None after every `interval` seconds in which none came.
    An exception the source raised is raised here, after the pieces it sent before it."""
    loop = asyncio.get_running_loop()
    pieces: deque[bytes] = deque()
    ended: list[BaseException | None] = []  # empty while reading; then None, or what it raised
    waiting: list[asyncio.Future[None] | None] = [None, None]  # the consumer's, the reader's

    async def read() -> None:
        try:
            async for piece in source:
                pieces.append(piece)
                _wake(waiting[0])
                while len(pieces) >= ahead:
                    waiting[1] = room = loop.create_future()
                    await room
        except Exception as exc:  # handed to the consumer, which raises it in its own task
            ended.append(exc)
        else:
            ended.append(None)
        finally:
            _wake(waiting[0])

    reader = loop.create_task(read())
    try:
        while True:
            if pieces:
                piece = pieces.popleft()
                _wake(waiting[1])
                yield piece
                continue
            if ended:
                if ended[0] is not None:
                    raise ended[0]
                return
            waiting[0] = arrival = loop.create_future()
            timer = loop.call_later(interval, _wake, arrival)
            try:
                await arrival
            finally:
                timer.cancel()
            if not pieces and not ended:
                yield None
    finally:
        reader.cancel()
