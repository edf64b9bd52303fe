"""One upstream HTTP/1.1 connection: an asyncio protocol feeding httptools' response parser.

The parser's callbacks fill in the response head and buffer body pieces; the one task reading the
response waits on a single future, woken by those callbacks. Reading stops (TCP backpressure)
while more than HIGH_WATER body bytes wait for a slow reader.

What the upstream sends is bounded before the parser sees it (`Limits`): neither llhttp nor
httptools limits a head, a chunk-size line or a trailer section, and what is past a limit is
never parsed.
"""

from __future__ import annotations

import asyncio
import select
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, cast

import httptools

HIGH_WATER = 256 * 1024
NO_RESPONSE = "Server disconnected without sending a response."
HEAD_CUT = "the upstream closed the connection in the middle of the response head"
WRITE_CUT = "the connection closed while the request was being written"
CUT_SHORT = "peer closed connection without sending complete message body"
SWITCHED = "the upstream switched protocols, which the proxy does not relay"

# A response head (status line, fields, and any 1xx heads before it) and, separately, a trailer
# section: Envoy allows ~60 KiB and 100 fields, h11 100 KiB. Unbounded, 5,000 duplicate fields
# of 1 KB held the event loop 6.8 s and 100 MB of them over 90 s (httpx merges duplicates in
# quadratic time); one 100 MB field held it 3.6 s at a time (httptools joins a field split over
# reads by concatenation).
MAX_HEAD_BYTES = 64 * 1024
MAX_FIELDS = 100
# Bytes the parser may take in a row without finishing anything: a chunk-size line with its
# extensions (llhttp skips those however long), or one trailer field (httptools buffers it whole).
# Counted per read, so a run is refused at most one socket read (256 KiB) past it.
MAX_LINE_BYTES = 16 * 1024

# What makes an idle connection unfit to carry a request: anything to read (a stray byte, a FIN).
_READABLE = select.POLLIN | select.POLLPRI


@dataclass(frozen=True, slots=True)
class Limits:
    head_bytes: int = MAX_HEAD_BYTES
    fields: int = MAX_FIELDS
    line_bytes: int = MAX_LINE_BYTES


class Failure(Exception):
    """The server broke the exchange: closed the connection early, or sent something that is not
    an HTTP/1.1 response."""


class Unanswered(Failure):
    """The connection ended after the whole request was handed to the kernel and before a single
    byte of response: the one failure after which the transport may send the request again."""


class WriteCut(Failure):
    """The connection ended while part of the request was still on its way: never sent again,
    the upstream may hold the rest of it."""


class TooLarge(Failure):
    """The response went past one of the `Limits`; nothing after that point was parsed."""


class _Stop(Exception):
    """Raised out of a parser callback to end the feed at once (the callback noted why)."""


class Connection(asyncio.Protocol):
    origin: tuple[str, str, int] = ("", "", 0)
    """Set by the pool, which files idle connections under it."""
    limits: Limits = Limits()
    """Set by the pool before the first request."""

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
        self.requests = 0
        """Requests sent on this connection: more than one before a send means it is reused."""
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
        self._written = False  # the whole request reached the kernel
        self._head_bytes = 0  # every byte of the response counts here until the head ends
        self._fields = 0
        self._trailer_bytes = 0
        self._trailer_fields = 0
        self._stalled = 0  # body bytes fed since the parser last called back (see _feed)

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

    def alive(self) -> bool:
        """Whether an idle connection can carry a request. The loop learns of the server's FIN or
        RST only when it next polls; a request written in between would be lost, so the socket
        is asked directly (httpcore checks the same before reusing a pooled connection)."""
        transport = self._transport
        if self._closed or transport is None or transport.is_closing():
            return False
        sock = transport.get_extra_info("socket")  # for TLS, the TCP socket under it
        return sock is None or _quiet(sock)

    async def send(self, data: bytes, timeout: float | None, head_only: bool = False) -> None:
        transport = self._transport
        if self._closed or transport is None or transport.is_closing():
            # Not reached from the pool, which checks alive() just before with no await between.
            raise Unanswered(NO_RESPONSE)
        self._start(head_only)
        self._busy = True
        self.requests += 1
        transport.write(data)
        while self._write_paused and not self._closed:
            await self._wait(timeout)
        # What the transport still buffers may never leave: only an empty buffer proves the
        # whole request went out (a later loss is then "unanswered", not a cut write).
        self._written = not self._closed and transport.get_write_buffer_size() == 0

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
        if not self._busy or self._complete or self._error is not None:
            # Bytes nobody asked for, after the response or after a failure: this connection's
            # framing cannot be trusted, and they are not parsed.
            self.close()
            return
        try:
            if self._head_done:
                self._feed(data)
            else:
                self._feed_head(data)
        except httptools.HttpParserUpgrade:
            # A 101 with an Upgrade header: on_headers_complete has already failed the exchange.
            # Raised out of data_received it would be logged as the loop's fatal error.
            self._fail(Failure(SWITCHED))
            self.close()
        except httptools.HttpParserError as exc:
            if not self._complete:  # else: bytes after a whole response, refused unparsed
                self._fail(Failure(f"malformed response from the upstream: {exc}"))
            self.close()

    def _feed_head(self, data: bytes) -> None:
        """Feeds the parser no more than the head's limit: a head that has not ended there is
        refused without the rest of it being parsed (or joined by httptools)."""
        room = self.limits.head_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            self._parser.feed_data(data)
            return
        self._head_bytes += room
        view = memoryview(data)
        self._parser.feed_data(view[:room])
        if self._head_done:
            self._feed(view[room:])
            return
        self._fail(TooLarge(f"upstream response head exceeds {self.limits.head_bytes} bytes"))
        self.close()

    def _feed(self, data: bytes | memoryview) -> None:
        """Feeds the body. Body bytes, a trailer field and the message's end each reset the count
        from their callback, so what it keeps is framing fed without any: a chunk-size line (its
        extensions) or a trailer field that goes on and on."""
        self._stalled += len(data)
        self._parser.feed_data(data)
        if self._stalled and self._stalled > self.limits.line_bytes:
            limit = self.limits.line_bytes
            self._fail(TooLarge(f"upstream chunk-size line or trailer field exceeds {limit} bytes"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.cancel_expiry()
        if self._head_done and not self._complete and self._close_delimited and exc is None:
            self._complete = True  # a body without length or chunks ends where the stream ends
        elif not self._complete and self._error is None:
            self._fail(self._lost(exc))
        self._keep_alive = False
        self._wake()
        self._on_closed(self)
        # The parser holds this protocol's callbacks and the transport holds the protocol: two
        # reference cycles that only the cycle collector would reclaim, and it no longer walks
        # long-lived objects (proxy/server/gc_tuning.py). Nothing feeds a closed connection.
        self._parser = _DETACHED
        self._transport = None

    def _lost(self, exc: Exception | None) -> Failure:
        """Why the exchange failed, by how far it had got when the connection ended."""
        kind: type[Failure]
        if self._head_done:
            kind, reason = Failure, CUT_SHORT
        elif self._head_bytes:
            kind, reason = Failure, HEAD_CUT
        elif self._written:
            kind, reason = Unanswered, NO_RESPONSE
        else:
            kind, reason = WriteCut, WRITE_CUT
        failure = kind(reason if exc is None else f"{reason} ({exc})")
        # The OS error (a reset) stays in the chain: the client's error message names it.
        failure.__cause__ = exc
        return failure

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _refuse(self, failure: Failure) -> NoReturn:
        """Fails the exchange from inside a parser callback and stops the parser there."""
        self._fail(failure)
        raise _Stop(str(failure))

    # ── httptools callbacks ──────────────────────────────────────────────────

    def on_message_begin(self) -> None:
        if self._complete:
            self._keep_alive = False  # a second response to one request: do not reuse
            raise _Stop("bytes after the response")  # nor parse it

    def on_header(self, name: bytes, value: bytes) -> None:
        self._stalled = 0
        if self._head_done:
            self._trailer(name, value)
            return
        self._fields += 1
        if self._fields > self.limits.fields:
            limit = self.limits.fields
            self._refuse(TooLarge(f"upstream response head has more than {limit} fields"))
        self.headers.append((name, value))

    def _trailer(self, name: bytes, value: bytes) -> None:
        """A trailer field, after a chunked body: counted against the limits, then dropped. RFC
        9110 §6.5.1: trailers must not be merged into the header section, and the proxy relays
        no trailers (its ASGI response has none)."""
        self._trailer_fields += 1
        self._trailer_bytes += len(name) + len(value) + 4  # ": " and CRLF
        limits = self.limits
        if self._trailer_fields > limits.fields:
            self._refuse(TooLarge(f"upstream response trailers exceed {limits.fields} fields"))
        if self._trailer_bytes > limits.head_bytes:
            self._refuse(TooLarge(f"upstream response trailers exceed {limits.head_bytes} bytes"))

    def on_headers_complete(self) -> None:
        if self._complete:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._informational = True  # 100 Continue and the like: the real head follows
            self.headers = []
            self._fields = 0
            return
        if status == 101:
            self._refuse(Failure(SWITCHED))
        if not 100 <= status <= 599:
            # httptools takes any three digits ("000", "099", "999"); RFC 9110 §15 says to treat
            # them as a server error, and the ASGI server could not send them on anyway.
            self._refuse(Failure(f"malformed response from the upstream: status {status}"))
        framed, bad_coding = _framing(self.headers)
        if bad_coding is not None:
            # llhttp reads "chunked, chunked" as chunked and "gzip" as close-delimited; an
            # upstream that frames its body in a way RFC 9112 §6.1 forbids is not guessed at.
            self._refuse(
                Failure(
                    "malformed response from the upstream: Transfer-Encoding "
                    f"{bad_coding[:100]!r} (chunked must be the last coding, once)"
                )
            )
        self.status = status
        self.http_version = b"HTTP/" + self._parser.get_http_version().encode("ascii")
        self._close_delimited = not self._head_only and status not in (204, 304) and not framed
        self._head_done = True
        if self._head_only:
            self._complete = True  # a HEAD answer's length describes a body that never comes
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._stalled = 0
        if self._complete:
            return
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered >= HIGH_WATER and not self._reading_paused and self._transport:
            self._reading_paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._stalled = 0
        if self._informational:
            self._informational = False
            return
        if self._complete:
            return
        self._complete = True
        self._keep_alive = not self._head_only and self._parser.should_keep_alive()
        self._wake()


class _NoCallbacks:
    """A parser's protocol that hears nothing."""


_DETACHED = httptools.HttpResponseParser(_NoCallbacks())
"""The parser of every closed connection: one, owning no connection."""


def _framing(headers: list[tuple[bytes, bytes]]) -> tuple[bool, str | None]:
    """Whether the head frames its body (Content-Length or Transfer-Encoding), and the
    Transfer-Encoding it gives when that is not one "chunked", last (RFC 9112 §6.1)."""
    framed = False
    codings: list[bytes] | None = None  # None: no Transfer-Encoding field
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            framed = True
        elif lowered == b"transfer-encoding":
            framed = True
            codings = codings or []
            codings += (c.strip().lower() for c in value.split(b",") if c.strip())
    if codings is None or (codings.count(b"chunked") == 1 and codings[-1] == b"chunked"):
        return framed, None
    return framed, b", ".join(codings).decode("latin-1")


def _quiet(sock: socket.socket) -> bool:
    """True when the socket has nothing to read and no error: the peer has neither sent anything
    nor closed. A zero-timeout poll answers that without touching the data: readable means a
    byte nobody asked for or the peer's FIN, and an error or hang-up is always reported. poll,
    not select: a descriptor past FD_SETSIZE (1024) is fine. About 1 µs, where a MSG_PEEK recv
    through a socket object made over the same descriptor took about 10 (it raised
    BlockingIOError on every healthy connection), once per reused connection."""
    fd = sock.fileno()
    if fd < 0:
        return False
    poller = select.poll()
    poller.register(fd, _READABLE)
    return not poller.poll(0)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
