"""A streamed answer's bytes for the client: the upstream body's pieces through the answer
machine (repair/answer.py), rendered by the door. The one stream loop of every door.

The machine decides how the answer ends; this loop only reads, and catches what breaks a read
(the upstream failed, an event outgrew its bound), which the machine then calls truncated.
`last_word()` is called once the answer's end is known and before it is sent (the keepalive
then starts no heartbeat after it). After the upstream's own error a door that relays bytes
gets the rest of the upstream's body as received; a door that renders its own end stops
reading there. Only after a clean end is the answer's turn kept (`keep`), and only then does
the terminal event go: the client fires its next request the moment it arrives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

from proxy.repair.answer import AnswerMachine
from proxy.repair.answer_ends import Clean, End
from proxy.repair.pipeline import Chunk
from proxy.repair.rendering import Rendering
from proxy.wire.limits import LimitExceeded

Keep = Callable[[], Awaitable[None]]
Words = Callable[[Exception], tuple[str, str]]
"""The proxy's (message, code) for what broke a stream off."""

FAILURES = (httpx.HTTPError, LimitExceeded)
"""What reading an upstream body raises when the upstream broke off or outgrew a bound."""


async def _nothing_kept() -> None:
    """The default `keep`: a door with no turn to keep."""


def _no_word() -> None:
    """The default `last_word`: nobody waits for it."""


async def answer_events(
    pieces: AsyncIterator[bytes],
    machine: AnswerMachine,
    rendering: Rendering,
    words: Words,
    keep: Keep = _nothing_kept,
    last_word: Callable[[], None] = _no_word,
) -> AsyncIterator[bytes]:
    """Every piece yielded is whole events."""
    relays = rendering.relays_bytes
    last: list[tuple[Chunk | None, bytes | None]] = []
    try:
        first = rendering.start()
        if first:
            yield first
        end: End | None = None
        try:
            async for data in pieces:
                out = rendering.pieces(machine.feed(data))
                if machine.end is not None and end is None:
                    end = machine.end  # the upstream's own error: the answer's last word
                    last_word()
                    if not relays:
                        if out:
                            yield out
                        break
                if out:
                    yield out
            last, end = await machine.finish()
        except FAILURES as exc:
            message, code = words(exc)
            end = machine.broke_off(type(exc).__name__, message, code)
        last_word()
        settled = rendering.settle(end, last)
        if isinstance(end, Clean):
            if settled:
                yield settled
            settled = b""
            await keep()
        closing = settled + rendering.terminal()
        if closing:
            yield closing
    finally:
        for kind, amount in rendering.counts.items():
            machine.count(kind, amount)
