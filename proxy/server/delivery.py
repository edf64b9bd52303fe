"""Turning an upstream response into the client's: relayed untouched, or repaired."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
from starlette.responses import Response

from proxy.repair.pipeline import RepairChain, repaired_stream
from proxy.repair.tally import Tally
from proxy.server.errors import error_event, error_response
from proxy.server.keepalive import Keepalive
from proxy.server.record import ExchangeRecord
from proxy.server.streamed_response import StreamedResponse
from proxy.upstream.body_decoding import Decoder, decoded, read_limited
from proxy.upstream.failures import describe_failure, upstream_origin
from proxy.upstream.headers import RawHeaders
from proxy.wire import json_codec
from proxy.wire.limits import LimitExceeded
from proxy.wire.sse import SSEDecoder

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


def repairs_comment(tally: Tally) -> bytes:
    """An SSE comment every client parser skips: the stream's repairs, for a client that asked."""
    return b": streamfix-repairs " + tally.summary().encode() + b"\n\n"


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


def repaired_sse(
    upstream: httpx.Response,
    chain: RepairChain,
    record: ExchangeRecord,
    headers: RawHeaders,
    max_event_bytes: int,
    decoder: Decoder,
    on_close: OnClose,
    keepalive: float = 0.0,
) -> Response:
    tally = record.tally

    def abort(exc: Exception) -> bytes:
        # No finish reason and no [DONE]: a truncated answer must not look complete.
        tally.note("stream_aborted", "upstream stream failed: %s", type(exc).__name__)
        if isinstance(exc, LimitExceeded):
            return error_event(str(exc), "upstream_error", exc.code)
        _, message, code = describe_failure(exc, _origin(upstream))
        return error_event(message, "upstream_error", code)

    beat = Keepalive(keepalive) if keepalive > 0 else None
    stream = repaired_stream(
        decoded(raw_body(upstream), decoder),
        chain,
        SSEDecoder(max_event_bytes),
        (httpx.HTTPError, LimitExceeded),
        abort,
        tally.count,
        (lambda: repairs_comment(tally)) if record.debug else bytes,
        beat.end if beat is not None else lambda: None,
    )
    kept = [f for f in headers if f[0].lower() not in _SSE_NAMES]
    return StreamedResponse(
        ClosingBody(upstream, stream, record, on_close),
        status_code=upstream.status_code,
        headers=[*kept, *SSE_HEADERS, repairs_header(tally)],
        media_type="text/event-stream",
        keepalive=beat,
    )


async def repaired_json(
    upstream: httpx.Response,
    chain: RepairChain,
    record: ExchangeRecord,
    headers: RawHeaders,
    decoder: Decoder,
    max_bytes: int,
    on_close: OnClose,
) -> Response:
    try:
        pieces = decoded(raw_body(upstream), decoder)
        raw = await read_limited(pieces, max_bytes, upstream.headers.get("content-length"))
    except (httpx.HTTPError, LimitExceeded) as exc:
        on_close()
        if isinstance(exc, LimitExceeded):
            return error_response(502, str(exc), "upstream_error", exc.code)
        status, message, code = describe_failure(exc, _origin(upstream))
        return error_response(status, message, "upstream_error", code)
    finally:
        await upstream.aclose()
    try:
        body = json_codec.loads(raw)
    except json_codec.JSONDecodeError:
        body = None  # not ours to fix: passed on as received
    if isinstance(body, dict) and await chain.on_response(body):
        raw = json_codec.dumps(body)
    on_close()  # a sync background task would cost a thread hand-off per request
    if record.client_copy is not None:
        # After the bookkeeping: a cancellation may land in the save's wait for the disk.
        record.client_copy.sent(raw)
        await record.client_copy.save()
    response = Response(raw, status_code=upstream.status_code)
    response.raw_headers.extend([*headers, repairs_header(record.tally)])
    return response


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


def _origin(upstream: httpx.Response) -> str | None:
    """`host:port` the response came from, for an error message; None when it has no request
    (then describe_failure asks the exception's own)."""
    try:
        return upstream_origin(upstream.request.url)
    except RuntimeError:  # httpx: no request was set on the response
        return None
