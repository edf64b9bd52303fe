"""A heartbeat on a stream the client has been sent nothing on for a while, for every door:
its form is the door's (a chat client's `: keepalive` comment, a Responses client's
`response.in_progress`, a Messages client's `ping`), the interval `[server] keepalive_seconds`.

nginx (`proxy_read_timeout`, 60 s), cloud load balancers (60 s idle) and many clients (30 s
read timeouts) cut a connection that stays silent, and a reasoning model can think for minutes
before its first token. A stream given a `Keepalive` gets its comment (`: keepalive`, which
every SSE parser skips) after each `interval` in which nothing went to the client: the upstream
was silent, or sent only what the proxy holds (half an event, a call held until whole).

What it costs a stream is one timer handle, re-armed lazily: a send records the loop's time,
and the timer, when it fires, goes back to sleep for the rest of the interval if something was
sent meanwhile, so it runs at most once per interval whatever the event rate. Nothing else is
done per event, and no task exists until a comment is due. A reader task per stream, as
`quiet_pings.with_pings` has, cost 1.5-2.4 us more per event and 3.6 KB and 24 objects per
open stream, against about 0.1 us and 1.0 KB and 2 objects here (bench/keepalive_cost.py),
which is why every door's heartbeat is this timer.

Where a comment may go: between two of the stream's own sends, never during one, and never
after its last word. Each send of the stream is one or more whole events (the SSE decoder hands
the pipeline only whole events), so a comment between two sends is between whole events on the
wire. A comment is sent by a short task; the stream waits for one still being sent before its
own next send, and none is started while a send of the stream is in progress (a slow client
holding it), nor once `end` was called: the pipeline calls it when it decides the stream's last
word (the final `[DONE]`, an abort's error event, the upstream's own error event), before that
word is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from starlette.types import Send

logger = logging.getLogger(__name__)

COMMENT = b": keepalive\n\n"

_EARLY = 0.001
"""A timer may fire up to the loop's clock resolution before its time: within this, it is due."""


class Keepalive:
    """One stream's keepalive: `relay` sends the stream's pieces, and a heartbeat in each of
    its silences. `beat()` is the door's heartbeat, made when it is due (a Responses heartbeat
    takes the stream's next sequence number): between two of the stream's sends, never during
    one, so its place in the stream is where it goes out."""

    __slots__ = ("_beat", "_busy", "_last", "_loop", "_ping", "_send", "_timer", "interval")

    def __init__(self, interval: float, beat: Callable[[], bytes] = lambda: COMMENT) -> None:
        self.interval = interval
        self._beat = beat
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._busy = False  # a send of the stream's own is in progress
        self._ping: asyncio.Task[None] | None = None  # a comment being sent

    async def relay(self, pieces: AsyncIterator[bytes], send: Send) -> None:
        """Send each piece as an ASGI body message (the response head is already out)."""
        self._send = send
        self._loop = loop = asyncio.get_running_loop()
        self._last = loop.time()
        self._timer = loop.call_at(self._last + self.interval, self._due)
        try:
            async for piece in pieces:
                if self._ping is not None:
                    await self._ping  # the comment first, whole; then the piece
                self._busy = True
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self._busy = False
                self._last = loop.time()
        finally:
            self.close()

    def end(self) -> None:
        """The stream's last word is decided: no comment is started from now on."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self.interval = 0.0  # as in the settings: 0 is never

    def close(self) -> None:
        """The stream is over, however it ended: the timer and a comment in flight go."""
        self.end()
        if self._ping is not None:
            self._ping.cancel()
            self._ping = None

    def _due(self) -> None:
        if not self.interval:
            return
        now = self._loop.time()
        quiet_until = self._last + self.interval
        if self._busy or self._ping is not None:
            when = now + self.interval  # not silent: the client is being sent something
        elif quiet_until - now > _EARLY:
            when = quiet_until  # something was sent since the timer was set
        else:
            self._ping = self._loop.create_task(self._comment(self._beat()))
            when = now + self.interval
        self._timer = self._loop.call_at(when, self._due)

    async def _comment(self, beat: bytes) -> None:
        try:
            await self._send({"type": "http.response.body", "body": beat, "more_body": True})
            self._last = self._loop.time()
        except Exception:  # the stream's own next send meets the same end; this one says why
            logger.warning("keepalive comment not sent; no more on this stream", exc_info=True)
            self.end()
        finally:
            self._ping = None
