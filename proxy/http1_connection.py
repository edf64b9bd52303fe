"""One upstream HTTP/1.1 connection: an asyncio protocol feeding httptools' response parser.

The parser's callbacks fill in the response head and buffer body pieces; the one task reading the
response waits on a single future, woken by those callbacks. Reading stops (TCP backpressure)
while more than HIGH_WATER body bytes wait for a slow reader.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import cast

import httptools

HIGH_WATER = 256 * 1024
NO_RESPONSE = "Server disconnected without sending a response."
CUT_SHORT = "peer closed connection without sending complete message body"
SWITCHED = "the upstream switched protocols, which the proxy does not relay"


class Failure(Exception):
    """The server broke the exchange: closed the connection early, or sent something that is not
    an HTTP/1.1 response."""


class Connection(asyncio.Protocol):
    origin: tuple[str, str, int] = ("", "", 0)
    """Set by the pool, which files idle connections under it."""

    def __init__(self, on_closed: Callable[[Connection], None]) -> None:
        self._on_closed = on_closed
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._closed = False
        self._write_paused = False
        self._reading_paused = False
        self._busy = False
        self._start(head_only=False)

    def _start(self, head_only: bool) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.http_version = b"HTTP/1.1"
        self._head_only = head_only
        self._head_done = False
        self._informational = False
        self._close_delimited = False
        self._complete = False
        self._keep_alive = False
        self._error: Exception | None = None
        self._body: deque[bytes] = deque()
        self._buffered = 0

    # ── what the transport and the response body call ────────────────────────

    @property
    def reusable(self) -> bool:
        transport = self._transport
        return (
            self._complete
            and self._keep_alive
            and not self._closed
            and transport is not None
            and not transport.is_closing()
        )

    async def send(self, data: bytes, timeout: float | None, head_only: bool = False) -> None:
        transport = self._transport
        if self._closed or transport is None or transport.is_closing():
            raise Failure(NO_RESPONSE)  # closed while idle: the caller's one retry covers it
        self._start(head_only)
        self._busy = True
        transport.write(data)
        while self._write_paused and not self._closed:
            await self._wait(timeout)

    async def response_head(self, timeout: float | None) -> None:
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait(timeout)

    async def read_body(self, timeout: float | None) -> bytes:
        """The next piece of the body; b"" at its end."""
        while True:
            if self._body:
                # One piece per HTTP chunk, as the upstream framed it: recordings keep the
                # boundaries, and the proxy forwards each event as soon as it has it.
                data = self._body.popleft()
                self._buffered -= len(data)
                if (
                    self._reading_paused
                    and self._buffered < HIGH_WATER // 2
                    and self._transport is not None
                    and not self._closed
                ):
                    self._reading_paused = False
                    self._transport.resume_reading()
                return data
            if self._complete:
                self._busy = False
                return b""
            if self._error is not None:
                raise self._error
            await self._wait(timeout)

    def expire_after(self, seconds: float) -> None:
        self._busy = False
        self._expiry = self._loop.call_later(seconds, self.close)

    def cancel_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def close(self) -> None:
        self.cancel_expiry()
        if self._transport is not None and not self._closed:
            self._closed = True
            self._transport.close()

    # ── waiting ──────────────────────────────────────────────────────────────

    async def _wait(self, timeout: float | None) -> None:
        waiter = self._waiter = self._loop.create_future()
        timer = None if timeout is None else self._loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ── asyncio.Protocol ─────────────────────────────────────────────────────

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        if not self._busy:
            self.close()  # bytes nobody asked for: this connection's framing cannot be trusted
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # A 101 with an Upgrade header: on_headers_complete has already failed the exchange.
            # Raised out of data_received it would be logged as the loop's fatal error.
            self._fail(Failure(SWITCHED))
            self.close()
        except httptools.HttpParserError as exc:
            self._fail(Failure(f"malformed response from the upstream: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.cancel_expiry()
        if self._head_done and not self._complete and self._close_delimited and exc is None:
            self._complete = True  # a body without length or chunks ends where the stream ends
        elif not self._complete and self._error is None:
            reason = CUT_SHORT if self._head_done else NO_RESPONSE
            self._fail(Failure(reason if exc is None else f"{reason} ({exc})"))
        self._keep_alive = False
        self._wake()
        self._on_closed(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    # ── httptools callbacks ──────────────────────────────────────────────────

    def on_message_begin(self) -> None:
        if self._complete:
            self._keep_alive = False  # a second response to one request: do not reuse

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._complete:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._complete:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._informational = True  # 100 Continue and the like: the real head follows
            self.headers = []
            return
        if status == 101:
            self._fail(Failure(SWITCHED))
            return
        if not 100 <= status <= 599:
            # httptools takes any three digits ("000", "099", "999"); RFC 9110 §15 says to treat
            # them as a server error, and the ASGI server could not send them on anyway.
            self._fail(Failure(f"malformed response from the upstream: status {status}"))
            return
        self.status = status
        self.http_version = b"HTTP/" + self._parser.get_http_version().encode("ascii")
        self._close_delimited = (
            not self._head_only
            and status not in (204, 304)
            and not any(
                name.lower() in (b"content-length", b"transfer-encoding")
                for name, _ in self.headers
            )
        )
        self._head_done = True
        if self._head_only:
            self._complete = True  # a HEAD answer's length describes a body that never comes
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._complete:
            return
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered >= HIGH_WATER and not self._reading_paused and self._transport:
            self._reading_paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self._complete:
            return
        self._complete = True
        self._keep_alive = not self._head_only and self._parser.should_keep_alive()
        self._wake()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
