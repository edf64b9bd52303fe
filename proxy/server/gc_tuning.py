"""The cycle collector kept off what lives long: the app, open streams, pooled connections.

CPython's collector (3.11 to 3.13) is generational, and a full collection walks every object it
tracks, with the event loop stopped. An open stream keeps about 180 such objects (its client
connection's protocol and parser, its task and coroutines, the upstream connection, the repair
chain: bench/capacity.py, phase `objects`), so with 5,000 streams open a full collection walked
some 900,000 objects and paused the proxy 0.5 to 0.9 s, during which no event moved; the
collector's rule of a full collection whenever the old generation grew by a quarter made that
happen a dozen times while the streams opened. The pause grew with the number of open streams.

With `server.gc_freeze` on (the default), each worker process:

- freezes (`gc.freeze`) what is alive when it starts serving: imports, settings, compiled
  schemas, the app are never walked again;
- freezes, after every collection of the middle generation, what survived it. What has outlived
  two collections is long-lived (an open stream, a pooled connection): frozen, it is still freed
  as soon as its last reference goes (reference counting ignores generations), but no collection
  walks it, so a full collection walks only what was promoted since the last freeze, and its
  pause no longer grows with the open streams;
- gives up, for that, reclaiming reference cycles among frozen objects while they stay frozen.
  The proxy's own per-connection cycles are broken when a connection closes (the upstream
  client's protocol, proxy/upstream/http1_connection.py), so a stream leaves none; for cycles
  that other code leaves, one full collection of everything (unfreeze, collect, freeze again)
  runs when the process's allocated blocks (`sys.getallocatedblocks`: its live small objects)
  have doubled since the last one, and no more often than every `FULL_EVERY_SECONDS`. Memory
  stays within about twice the live set; that collection's pause does grow with the open
  streams, and it comes at most once per interval, only after such growth (in a steady state
  with nothing left over, never). Not `gc.get_freeze_count()`: it walks the frozen list, some
  10 ms a million objects, with the loop stopped.

The collector is process-wide and tests run several apps in one process: the first app to start
installs the freezing and the last to stop removes it and unfreezes everything.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from typing import Any

logger = logging.getLogger(__name__)

FULL_EVERY_SECONDS = 300.0
"""Least time between two full collections of everything (the leftover cycles' bound)."""
GROWTH = 2.0
"""How much the allocated blocks grow before a full collection of everything is due."""
CHECK_SECONDS = 10.0
"""How often the allocated blocks are counted (about 0.1 ms per 2 million)."""


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    """gc.callbacks hook: after a collection of generation 1 or 2, freeze what is left. Only
    lists are spliced: constant time, whatever the number of objects."""
    if phase == "stop" and info["generation"] >= 1:
        gc.freeze()


class FrozenHeap:
    """One app's share of the policy; `start` in the lifespan, `stop` at its end."""

    _users = 0

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._baseline = sys.getallocatedblocks()
        self._last_full = time.monotonic()
        self._timer: asyncio.TimerHandle | None = loop.call_later(CHECK_SECONDS, self._tick)

    @classmethod
    def start(cls) -> FrozenHeap:
        if FrozenHeap._users == 0:
            # No collection first: the start-up's garbage is a few hundred objects, and a
            # collection in a large process (a test run) would cost more than it frees.
            gc.freeze()
            gc.callbacks.append(_freeze_survivors)
        FrozenHeap._users += 1
        return cls(asyncio.get_running_loop())

    def stop(self) -> None:
        if self._timer is None:
            return
        self._timer.cancel()
        self._timer = None
        FrozenHeap._users -= 1
        if FrozenHeap._users == 0:
            gc.callbacks.remove(_freeze_survivors)
            gc.unfreeze()  # the collector takes everything back as the oldest generation

    def check(self, full_every: float = FULL_EVERY_SECONDS, growth: float = GROWTH) -> None:
        """The full collection of everything, when the allocated blocks have grown `growth`
        times since the last one and `full_every` seconds have passed."""
        blocks = sys.getallocatedblocks()
        now = time.monotonic()
        if blocks > growth * self._baseline and now - self._last_full >= full_every:
            self._collect_everything(blocks)
            self._last_full = time.monotonic()
            self._baseline = sys.getallocatedblocks()

    def _tick(self) -> None:
        self.check()
        self._timer = self._loop.call_later(CHECK_SECONDS, self._tick)

    @staticmethod
    def _collect_everything(blocks: int) -> None:
        began = time.perf_counter()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        logger.info(
            "full collection (%d allocated blocks, twice as many as after the last): %d objects "
            "freed, %.0f ms",
            blocks,
            collected,
            (time.perf_counter() - began) * 1000,
        )
