"""What every delivery of an answer shares: the SSE headers, the repairs header, the relay of
an upstream's bytes as they came, and the body that books and closes an exchange once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping

import httpx
from starlette.responses import Response

from proxy.repair.tally import Tally
from proxy.server.record import ExchangeRecord
from proxy.server.streamed_response import StreamedResponse
from proxy.upstream.headers import RawHeaders

# A repaired stream must reach the client unbuffered, uncached and unaltered, whatever the
# upstream said: `no-cache` and `no-store` keep caches from answering with it or keeping it (an
# answer is one client's), `no-transform` keeps proxies in between from compressing or
# rewriting it (the proxy itself never compresses), and nginx holds events back in its buffer
# unless told `X-Accel-Buffering: no`.
SSE_HEADERS = [
    (b"cache-control", b"no-cache, no-store, no-transform"),
    (b"x-accel-buffering", b"no"),
]
_SSE_NAMES = {name for name, _ in SSE_HEADERS}

OnClose = Callable[[], None]

REPAIRS_HEADER = b"x-streamfix-repairs"
"""On every exchange's response: the repairs known when its head is sent (all of them for a
non-streamed body; the request side's for a stream, whose own follow in the debug comment)."""


def repairs_header(tally: Tally) -> tuple[bytes, bytes]:
    return (REPAIRS_HEADER, tally.summary().encode())


def repairs_comment(tally: Tally, also: Mapping[str, int] | None = None) -> bytes:
    """An SSE comment every client parser skips: the stream's repairs, for a client that asked
    (`x-streamfix-debug: 1`); `also`, what a front's translation counted so far."""
    return b": streamfix-repairs " + tally.summary(also).encode() + b"\n\n"


def relay(
    upstream: httpx.Response, record: ExchangeRecord, headers: RawHeaders, on_close: OnClose
) -> Response:
    """Errors, non-SSE bodies and other paths: the upstream's bytes as they come, undecoded
    (their `Content-Encoding` travels with them)."""
    return StreamedResponse(
        ClosingBody(upstream, raw_body(upstream), record, on_close),
        status_code=upstream.status_code,
        headers=[*headers, repairs_header(record.tally)],
    )


def raw_body(upstream: httpx.Response) -> AsyncIterator[bytes]:
    """The body as the upstream framed it, undecoded. A response that an in-process transport
    built from bytes is already read: its content is the whole body."""
    if upstream.is_stream_consumed:
        return _one(upstream.content)
    return upstream.aiter_raw()


async def _one(content: bytes) -> AsyncIterator[bytes]:
    yield content


class ClosingBody:
    """The body the client gets, which closes the upstream response and books the exchange
    exactly once, however the stream ends: run out, failed, cancelled, or closed before its
    first byte (a shutdown landing while the response head was still being written), which an
    async generator's `finally` would never see. The record's client copy, if it has one
    (a recording), gets every part the client was sent and is saved at the end."""

    def __init__(
        self,
        upstream: httpx.Response,
        body: AsyncIterator[bytes],
        record: ExchangeRecord,
        on_close: OnClose,
    ) -> None:
        self._upstream = upstream
        self._body = body
        self._on_close = on_close
        self._copy = record.client_copy
        self._closed = False

    def __aiter__(self) -> ClosingBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            part = await anext(self._body)
        except BaseException:  # the end, a failure or a cancellation: cleaned up, then raised
            await self.aclose()
            raise
        if self._copy is not None:
            self._copy.sent(part)
        return part

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Bookkeeping first: when a shutdown cancels this stream, an await below is where the
        # cancellation lands, and the exchange must still be logged and counted. A client copy
        # takes what it keeps before its first await (`ClientCopy.save`), so it is not lost.
        try:
            self._on_close()
            if self._copy is not None:
                await self._copy.save()
        finally:
            try:
                aclose = getattr(self._body, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                await self._upstream.aclose()
