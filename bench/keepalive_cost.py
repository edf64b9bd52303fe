"""What a stream's keepalive costs: per event, and per open stream, in one process.

    python bench/keepalive_cost.py                 # about 20 s
    python bench/keepalive_cost.py --streams 10000 --events 200000 --rounds 5

Three ways to send a stream's pieces to the ASGI `send`, the same pieces through each:

- **plain**: `async for piece in body: await send(...)`, no keepalive (`keepalive_seconds = 0`);
- **timer**: `proxy.server.keepalive.Keepalive.relay`, what the proxy runs: one timer handle per
  stream, re-armed lazily, a clock read per event;
- **reader task**: `proxy.server.quiet_pings.with_pings` around the body (a task that reads the
  body ahead, a future and a timer per wait), the first way the keepalive was written.

Per event: `--events` pieces through each way, the ways taking turns for `--rounds` rounds, on
the loop the proxy serves on (uvloop when installed, as uvicorn picks it); the body suspends once
per piece, as an upstream read does; microseconds per piece, the median over rounds, and each
way less plain. Per open stream: `--streams` streams opened through each way and left waiting
on a silent upstream after their first piece, with a keepalive interval that does not fire
(15 s, the default): the Python memory (tracemalloc) and the objects the collector tracks, per
stream, each way less plain. Nothing is sent over a network.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reader_task_pings import with_pings
from proxy.server.keepalive import Keepalive

INTERVAL = 15.0
PIECE = b'data: {"choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n'

Send = Callable[[dict[str, Any]], Awaitable[None]]
Way = Callable[[AsyncIterator[bytes], Send], Awaitable[None]]


async def plain(body: AsyncIterator[bytes], send: Send) -> None:
    async for piece in body:
        await send({"type": "http.response.body", "body": piece, "more_body": True})


async def timer(body: AsyncIterator[bytes], send: Send) -> None:
    await Keepalive(INTERVAL).relay(body, send)


async def reader_task(body: AsyncIterator[bytes], send: Send) -> None:
    async for piece in with_pings(body, INTERVAL):
        if piece is not None:
            await send({"type": "http.response.body", "body": piece, "more_body": True})


WAYS: dict[str, Way] = {"plain": plain, "timer": timer, "reader task": reader_task}


async def discard(message: dict[str, Any]) -> None:
    pass


async def pieces(count: int) -> AsyncIterator[bytes]:
    for _ in range(count):
        await asyncio.sleep(0)  # an upstream read: the loop runs once per piece
        yield PIECE


async def per_event(events: int, rounds: int) -> dict[str, float]:
    """Microseconds per piece, median over rounds, the ways taking turns."""
    times: dict[str, list[float]] = {name: [] for name in WAYS}
    for turn in range(rounds):
        names = list(WAYS)
        names = names[turn % len(names) :] + names[: turn % len(names)]
        for name in names:
            start = time.perf_counter()
            await WAYS[name](pieces(events), discard)
            times[name].append((time.perf_counter() - start) / events * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


async def held(silence: asyncio.Future[None]) -> AsyncIterator[bytes]:
    yield PIECE
    await silence  # the upstream thinks


async def per_stream(streams: int) -> dict[str, tuple[float, float]]:
    """Bytes and collector-tracked objects per open stream, each way."""
    found = {}
    for name, way in WAYS.items():
        silence: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        gc.collect()
        tracemalloc.start()
        before_bytes = tracemalloc.get_traced_memory()[0]
        before_objects = len(gc.get_objects())
        tasks = [asyncio.ensure_future(way(held(silence), discard)) for _ in range(streams)]
        for _ in range(3):
            await asyncio.sleep(0)  # each stream sent its piece and waits
        gc.collect()
        after_bytes = tracemalloc.get_traced_memory()[0]
        after_objects = len(gc.get_objects())
        tracemalloc.stop()
        found[name] = (
            (after_bytes - before_bytes) / streams,
            (after_objects - before_objects) / streams,
        )
        silence.set_result(None)
        await asyncio.gather(*tasks)
    return found


async def measure(args: argparse.Namespace) -> None:
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(f"loop: {loop}; Python {sys.version.split()[0]}; interval {INTERVAL:g} s")
    print(f"\nper event ({args.events:,} pieces, median of {args.rounds} rounds):")
    event_costs = await per_event(args.events, args.rounds)
    for name, cost in event_costs.items():
        extra = cost - event_costs["plain"]
        print(f"  {name:12} {cost:6.2f} us/event  ({extra:+.2f} us over plain)")
    print(f"\nper open stream ({args.streams:,} streams waiting on a silent upstream):")
    stream_costs = await per_stream(args.streams)
    base_bytes, base_objects = stream_costs["plain"]
    for name, (size, objects) in stream_costs.items():
        print(
            f"  {name:12} {size:8.0f} B, {objects:5.1f} objects"
            f"  ({size - base_bytes:+.0f} B, {objects - base_objects:+.1f} objects over plain)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(measure(args))
    else:
        uvloop.run(measure(args))


if __name__ == "__main__":
    main()
