"""Turning an upstream response into the client's: relayed untouched, or repaired."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import orjson
from starlette.responses import Response

from proxy.errors import error_event, error_response
from proxy.exchange import Exchange
from proxy.pipeline import RepairChain, repaired_stream
from proxy.recording import CASSETTE
from proxy.sse import EventTooLarge, SSEDecoder
from proxy.streaming import StreamedResponse
from proxy.upstream import describe_failure

SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}

OnClose = Callable[[], None]


def relay(upstream: httpx.Response, headers: dict[str, str], on_close: OnClose) -> Response:
    """Errors, non-SSE bodies and other paths: the upstream's bytes, as they come."""
    return StreamedResponse(
        _Closing(upstream, upstream.aiter_bytes(), on_close),
        status_code=upstream.status_code,
        headers=headers,
    )


def repaired_sse(
    upstream: httpx.Response,
    chain: RepairChain,
    exchange: Exchange,
    headers: dict[str, str],
    max_event_bytes: int,
    on_close: OnClose,
) -> Response:
    def abort(exc: Exception) -> bytes:
        # No finish reason and no [DONE]: a truncated answer must not look complete.
        exchange.note("stream_aborted", "upstream stream failed: %s", type(exc).__name__)
        if isinstance(exc, EventTooLarge):
            return error_event(str(exc), "upstream_error", "event_too_large")
        _, message, code = describe_failure(exc)
        return error_event(message, "upstream_error", code)

    stream = repaired_stream(
        upstream.aiter_bytes(),
        chain,
        SSEDecoder(max_event_bytes),
        (httpx.HTTPError, EventTooLarge),
        abort,
    )
    return StreamedResponse(
        _Closing(upstream, stream, on_close),
        status_code=upstream.status_code,
        headers={**headers, **SSE_HEADERS},
        media_type="text/event-stream",
    )


async def repaired_json(
    upstream: httpx.Response, chain: RepairChain, headers: dict[str, str], on_close: OnClose
) -> Response:
    try:
        raw = await upstream.aread()
    except httpx.HTTPError as exc:
        status, message, code = describe_failure(exc)
        on_close()
        return error_response(status, message, "upstream_error", code)
    finally:
        await upstream.aclose()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None  # not ours to fix: passed on as received
    if isinstance(body, dict) and await chain.on_response(body):
        raw = orjson.dumps(body)
    if (recording := upstream.extensions.get(CASSETTE)) is not None:
        recording.sent(raw)
        recording.save()
    on_close()  # a sync background task would cost a thread hand-off per request
    return Response(raw, status_code=upstream.status_code, headers=headers)


class _Closing:
    """The body the client gets, which closes the upstream response and books the exchange
    exactly once, however the stream ends: run out, failed, cancelled, or closed before its
    first byte (a shutdown landing while the response head was still being written), which an
    async generator's `finally` would never see. A recording transport also gets to see what
    the client was sent."""

    def __init__(
        self, upstream: httpx.Response, body: AsyncIterator[bytes], on_close: OnClose
    ) -> None:
        self._upstream = upstream
        self._body = body
        self._on_close = on_close
        self._recording = upstream.extensions.get(CASSETTE)
        self._closed = False

    def __aiter__(self) -> _Closing:
        return self

    async def __anext__(self) -> bytes:
        try:
            part = await anext(self._body)
        except BaseException:  # the end, a failure or a cancellation: cleaned up, then raised
            await self.aclose()
            raise
        if self._recording is not None:
            self._recording.sent(part)
        return part

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Bookkeeping first: when a shutdown cancels this stream, an await below is where the
        # cancellation lands, and the exchange must still be logged and counted.
        try:
            self._on_close()
            if self._recording is not None:
                self._recording.save()
        finally:
            try:
                aclose = getattr(self._body, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                await self._upstream.aclose()
