"""The store in this process: a bounded least-recently-used table with a time to live.

Each process has its own: with several workers or replicas, a follow-up that lands on another
one misses what this one kept (the start-up line says so; Redis shares them instead).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import OrderedDict
from collections.abc import Callable

from proxy.store.protocol import Value
from proxy.wire import json_codec

# What one memory-store entry holds beyond its key and value objects: the (expiry, value, size)
# tuple, the float, the int, and its share of the OrderedDict (hash slot, order node, spare
# room). tracemalloc measured 172-210 bytes on CPython 3.11, from 1,000 to 100,000 entries.
ENTRY_OVERHEAD = 216


class MemoryStore:
    """Least-recently-used with a time to live; memory stays flat at `max_entries`."""

    def __init__(
        self,
        max_entries: int,
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        max_total_bytes: int | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self.max_total_bytes = max_total_bytes
        self.total_bytes = 0
        """Memory the entries take, as the interpreter holds them (`entry_bytes`): reasoning
        texts make entries very unequal, so their count alone bounds nothing."""
        self.errors = 0
        self.answering = True  # nothing to lose touch with
        self._clock = clock
        # (expiry, value as compact UTF-8 JSON bytes, what the entry was counted as): bytes take
        # a fraction of the nested dicts they encode, and never more than their UTF-8 length (a
        # str with one emoji in it takes four bytes a character, all of them). The count is kept
        # so a drop takes off exactly what the put added.
        self._entries: OrderedDict[str, tuple[float, bytes, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get_many(self, keys: list[str]) -> dict[str, Value]:
        now = self._clock()
        found: dict[str, Value] = {}
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                continue
            expires, value, _ = entry
            if expires <= now:
                self._drop(key)
                continue
            self._entries.move_to_end(key)
            found[key] = json_codec.loads(value)
        return found

    async def put_many(self, items: dict[str, Value]) -> bool:
        self._put(items)
        return True

    def _put(self, items: dict[str, Value]) -> None:
        expires = self._clock() + self.ttl_seconds
        for key, value in items.items():
            if key in self._entries:
                self._drop(key)
            # A copy: orjson's own result keeps the buffer it grew while writing, up to ten
            # times the bytes it holds (sys.getsizeof does not see that spare room). Written
            # by json_codec: a receipt may hold an integer orjson cannot write.
            encoded = bytes(memoryview(json_codec.dumps(value)))
            size = entry_bytes(key, encoded)
            self._entries[key] = (expires, encoded, size)
            self.total_bytes += size
        budget = self.max_total_bytes
        while len(self._entries) > self.max_entries or (
            budget is not None and self.total_bytes > budget and self._entries
        ):
            self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        self.total_bytes -= self._entries.pop(key)[2]

    def put_later(self, items: dict[str, Value]) -> asyncio.Future[bool]:
        self._put(items)  # in-process: nothing to wait for
        done = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    async def ping(self) -> bool:
        return True

    async def aclose(self) -> None:
        self._entries.clear()
        self.total_bytes = 0


def entry_bytes(key: str, value: bytes) -> int:
    """The memory one entry takes: its key and value objects as allocated, and the rest."""
    return sys.getsizeof(key) + sys.getsizeof(value) + ENTRY_OVERHEAD
