"""Bounded decoding of compressed upstream bodies (proxy/upstream/body_decoding.py): a bomb
costs the proxy at most its limit plus one piece, whatever one network read inflates to."""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import AsyncIterator

import pytest

from proxy.upstream.body_decoding import PIECE, UndecodableBody, decoded, decoder_for, read_limited
from proxy.wire.limits import LimitExceeded

MIB = 1024 * 1024


def bomb(inflated_mib: int) -> bytes:
    """gzip of a JSON string of zeros: about 1 KiB per MiB inflated."""
    compressor = zlib.compressobj(9, wbits=31)
    parts = [compressor.compress(b'{"pad":"')]
    block = b"0" * MIB
    parts += [compressor.compress(block) for _ in range(inflated_mib)]
    parts += [compressor.compress(b'"}'), compressor.flush()]
    return b"".join(parts)


async def reads(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_a_bomb_stops_at_the_limit_plus_one_piece() -> None:
    # 256 KiB of this bomb inflate to about 256 MiB: decoding a whole read before checking
    # the limit (the first version did) peaked at ~320 MiB for a 64 MiB limit.
    data = bomb(512)
    limit = 16 * MIB
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded) as raised:
            await read_limited(decoded(reads(data, 256 * 1024), decoder_for("gzip")), limit, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raised.value.code == "response_too_large"
    # The parts held, one piece past the limit, one read and zlib's own state: about 1 MiB.
    assert peak < limit + 2 * MIB + len(data), peak


async def test_a_streamed_body_is_decoded_in_bounded_pieces() -> None:
    data = bomb(8)
    pieces = [p async for p in decoded(reads(data, 1 << 20), decoder_for("gzip"))]
    assert max(map(len, pieces)) <= PIECE
    assert sum(map(len, pieces)) == 8 * MIB + len(b'{"pad":""}')


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS], ids=["zlib", "raw"])
async def test_deflate_is_read_zlib_wrapped_or_raw(wbits: int) -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    data = compressor.compress(b'{"ok":true}') + compressor.flush()
    body = await read_limited(decoded(reads(data, 3), decoder_for("deflate")), MIB, None)
    assert body == b'{"ok":true}'


async def test_a_corrupt_body_is_a_clear_error() -> None:
    with pytest.raises(UndecodableBody):
        await read_limited(decoded(reads(b"\x1f\x8bnot gzip", 4), decoder_for("gzip")), MIB, None)


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, br", "compress"])
def test_encodings_the_proxy_does_not_decode_have_no_decoder(encoding: str) -> None:
    assert decoder_for(encoding) is None


@pytest.mark.parametrize("encoding", ["", "identity", "gzip", "x-gzip", "deflate", " GZIP "])
def test_encodings_the_proxy_decodes(encoding: str) -> None:
    assert decoder_for(encoding) is not None
