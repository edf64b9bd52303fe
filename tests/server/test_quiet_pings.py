"""proxy/server/quiet_pings.py: pieces in order, a marker per silent interval, the source's
failure raised after what it sent, and a reader that stays within AHEAD pieces of the consumer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from proxy.server.quiet_pings import with_pings


async def test_pieces_in_order_and_a_marker_per_silence() -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"a"
        await asyncio.sleep(0.25)
        yield b"b"

    got = [piece async for piece in with_pings(source(), 0.1)]
    assert got[0] == b"a" and got[-1] == b"b"
    assert 1 <= got.count(None) <= 3


async def test_the_sources_failure_comes_after_its_pieces() -> None:
    async def source() -> AsyncIterator[bytes]:
        yield b"a"
        raise ValueError("cut")

    got = []
    with pytest.raises(ValueError, match="cut"):
        async for piece in with_pings(source(), 1):
            got.append(piece)
    assert got == [b"a"]


async def test_the_reader_waits_for_a_slow_consumer() -> None:
    read = 0

    async def source() -> AsyncIterator[bytes]:
        nonlocal read
        for _ in range(100):
            read += 1
            yield b"x"

    stream = with_pings(source(), 1, ahead=4)
    assert await anext(stream) == b"x"
    await asyncio.sleep(0.05)
    assert read <= 6
    rest = [piece async for piece in stream]
    assert len(rest) == 99
