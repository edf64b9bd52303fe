"""Reading an upstream's refusal without losing it: a bounded look at a 400/422 body, and the
response again with every byte still there, should it go to the client after all."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

import httpx

from proxy.upstream.body_decoding import Decoder, decoder_for

MAX_ERROR_BYTES = 64 * 1024
"""The most of an error body read to look for what it refuses; a longer one is relayed unread."""


async def read_refusal(upstream: httpx.Response) -> tuple[httpx.Response, str | None]:
    """The error body's text (None: too long, or in an encoding the proxy does not decode), and
    a response that still gives the client every byte of it (the part read here, then the
    rest)."""
    decoder = decoder_for(upstream.headers.get("content-encoding", ""))
    if upstream.is_stream_consumed:  # built from bytes in-process: already whole
        raw, replay = [upstream.content], upstream
    else:
        raw = []
        body = upstream.aiter_raw()
        rest: AsyncIterator[bytes] | None = body
        size = 0
        async for piece in body:
            raw.append(piece)
            size += len(piece)
            if size > MAX_ERROR_BYTES:
                break
        else:
            rest = None
        replay = _replayed(upstream, raw, rest)
        if size > MAX_ERROR_BYTES:
            return replay, None
    if decoder is None:
        return replay, None
    text = b"".join(_decoded(raw, decoder))[: MAX_ERROR_BYTES * 4]
    return replay, text.decode("utf-8", "replace")


def resent(outgoing: httpx.Request, content: bytes) -> httpx.Request:
    """`outgoing` again, same URL, headers and extensions, with another body."""
    headers = [(k, v) for k, v in outgoing.headers.raw if k.lower() != b"content-length"]
    return httpx.Request(
        outgoing.method,
        outgoing.url,
        headers=headers,
        content=content,
        extensions=outgoing.extensions,
    )


def _decoded(raw: list[bytes], decoder: Decoder) -> list[bytes]:
    out: list[bytes] = []
    size = 0
    try:
        for piece in raw:
            for part in decoder.decode(piece):
                out.append(part)
                size += len(part)
                if size > MAX_ERROR_BYTES * 4:
                    return out
        out.append(decoder.flush())
    except zlib.error:  # a body that does not decode names nothing (and is relayed as it came)
        return []
    return out


class _Replay(httpx.AsyncByteStream):
    def __init__(
        self, upstream: httpx.Response, read: list[bytes], rest: AsyncIterator[bytes] | None
    ) -> None:
        self._upstream = upstream
        self._read = read
        self._rest = rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._read:
            yield piece
        if self._rest is not None:
            async for piece in self._rest:
                yield piece

    async def aclose(self) -> None:
        await self._upstream.aclose()


def _replayed(
    upstream: httpx.Response, read: list[bytes], rest: AsyncIterator[bytes] | None
) -> httpx.Response:
    return httpx.Response(
        upstream.status_code,
        headers=upstream.headers,
        stream=_Replay(upstream, read, rest),
        request=upstream.request,
        extensions=upstream.extensions,
    )
