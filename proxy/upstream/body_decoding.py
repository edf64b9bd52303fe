"""Upstream bodies as the repairs need them: decoded with a bound, or left alone.

The proxy asks every upstream for `identity`, but some compress anyway. A body the repairs read
is decoded here, piece by bounded piece, so a small gzip bomb cannot expand into gigabytes in
one call. A body in an encoding the proxy does not decode is relayed as received, its
`Content-Encoding` kept, so the client can still read it.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from proxy.wire.limits import LimitExceeded

PIECE = 64 * 1024
"""The most one decompression step may produce: what a hostile body costs at once."""


class Decoder(Protocol):
    def decode(self, data: bytes) -> Iterator[bytes]:
        """The pieces `data` decodes to, produced one at a time as they are asked for."""
        ...

    def flush(self) -> bytes: ...


class _Identity:
    def decode(self, data: bytes) -> Iterator[bytes]:
        yield data

    def flush(self) -> bytes:
        return b""


class _Zlib:
    """gzip, or HTTP's `deflate`: zlib-wrapped as the RFC says, or raw as some servers send."""

    def __init__(self, encoding: str) -> None:
        # 32 + MAX_WBITS reads a gzip or a zlib header; raw deflate is tried when that fails.
        self._raw_fallback = encoding == "deflate"
        self._inflate = zlib.decompressobj(32 + zlib.MAX_WBITS)
        self._started = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        # A generator, not a list: 64 KiB of a bomb inflate to 64 MiB, and the reader must be
        # able to stop after the first piece past its limit, not after the whole read.
        try:
            piece = self._inflate.decompress(data, PIECE)
        except zlib.error:
            if not (self._raw_fallback and not self._started):
                raise
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            piece = self._inflate.decompress(data, PIECE)
        self._started = True
        yield piece
        while self._inflate.unconsumed_tail:
            yield self._inflate.decompress(self._inflate.unconsumed_tail, PIECE)

    def flush(self) -> bytes:
        return self._inflate.flush()


DECODED_ENCODINGS = ("identity", "gzip", "x-gzip", "deflate")


def decodes(content_encoding: str) -> bool:
    """Whether `decoder_for` has a decoder for this `Content-Encoding`."""
    return content_encoding.strip().lower() in ("", *DECODED_ENCODINGS)


def decoder_for(content_encoding: str) -> Decoder | None:
    """A decoder for this `Content-Encoding`, or None when the proxy does not decode it (br,
    zstd, a stack of several)."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return _Identity()
    if encoding in DECODED_ENCODINGS:
        return _Zlib(encoding)
    return None


class UndecodableBody(LimitExceeded):
    code = "upstream_body_undecodable"


def decoded(raw: AsyncIterator[bytes], decoder: Decoder) -> AsyncIterator[bytes]:
    """The body decoded, no piece larger than PIECE (or than a raw piece, for identity)."""
    if isinstance(decoder, _Identity):
        return raw  # nearly every body: no layer in between
    return _decoded(raw, decoder)


async def _decoded(raw: AsyncIterator[bytes], decoder: Decoder) -> AsyncIterator[bytes]:
    try:
        async for data in raw:
            for piece in decoder.decode(data):
                if piece:
                    yield piece
        tail = decoder.flush()
    except zlib.error as exc:
        raise UndecodableBody(f"the upstream's compressed body is corrupt: {exc}") from exc
    if tail:
        yield tail


async def read_limited(pieces: AsyncIterator[bytes], limit: int, declared: str | None) -> bytes:
    """The whole body, refused as soon as it passes `limit` bytes (decoded), or at once when the
    upstream declares a larger length."""
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    parts: list[bytes] = []
    size = 0
    async for piece in pieces:
        size += len(piece)
        if size > limit:
            raise _too_large(limit)
        parts.append(piece)
    return b"".join(parts)


def _too_large(limit: int) -> LimitExceeded:
    message = f"the upstream's response body exceeds {limit} bytes"
    return LimitExceeded(message, "response_too_large")
