"""Where receipts live between exchanges: a bounded in-process LRU, or Redis for replicas.

A store failure must never fail a request: the proxy then just cannot remember this time.
Both stores therefore swallow backend errors (logged, counted) instead of raising.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import orjson

logger = logging.getLogger(__name__)

Receipt = dict[str, Any]

# What one memory-store entry holds beyond its key and value objects: the (expiry, value, size)
# tuple, the float, the int, and its share of the OrderedDict (hash slot, order node, spare
# room). tracemalloc measured 172-210 bytes on CPython 3.11, from 1,000 to 100,000 entries.
ENTRY_OVERHEAD = 216

MAX_VALUE_BYTES = 1_048_576
"""The largest receipt kept by default (`[receipts] max_value_bytes`): reasoning texts are large
(DeepSeek's can run to hundreds of kilobytes), but no upstream may grow the store without bound."""


class ReceiptStore(Protocol):
    errors: int

    async def get_many(self, keys: list[str]) -> dict[str, Receipt]: ...

    async def put_many(self, items: dict[str, Receipt]) -> bool:
        """Store; False when the backend failed (logged and counted in `errors`)."""
        ...

    def put_later(self, items: dict[str, Receipt]) -> asyncio.Future[bool]:
        """Store in the background: the write outlives the request that made it, and whoever
        wants the outcome (was it stored?) can wait for the future without cancelling it."""
        ...

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...


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
        self._clock = clock
        # (expiry, value as compact UTF-8 JSON bytes, what the entry was counted as): bytes take
        # a fraction of the nested dicts they encode, and never more than their UTF-8 length (a
        # str with one emoji in it takes four bytes a character, all of them). The count is kept
        # so a drop takes off exactly what the put added.
        self._entries: OrderedDict[str, tuple[float, bytes, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get_many(self, keys: list[str]) -> dict[str, Receipt]:
        now = self._clock()
        found: dict[str, Receipt] = {}
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                continue
            expires, value, _ = entry
            if expires <= now:
                self._drop(key)
                continue
            self._entries.move_to_end(key)
            found[key] = orjson.loads(value)
        return found

    async def put_many(self, items: dict[str, Receipt]) -> bool:
        self._put(items)
        return True

    def _put(self, items: dict[str, Receipt]) -> None:
        expires = self._clock() + self.ttl_seconds
        for key, value in items.items():
            if key in self._entries:
                self._drop(key)
            # A copy: orjson's own result keeps the buffer it grew while writing, up to ten
            # times the bytes it holds (sys.getsizeof does not see that spare room).
            encoded = bytes(memoryview(orjson.dumps(value)))
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

    def put_later(self, items: dict[str, Receipt]) -> asyncio.Future[bool]:
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


class RedisStore:
    """Receipts as JSON strings under `prefix`, each with the TTL, shared by every replica."""

    def __init__(self, url: str, ttl_seconds: float, prefix: str = "streamfix:") -> None:
        # Imported here: only Redis deployments need it.
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self.errors = 0
        self._ttl = max(1, int(ttl_seconds))
        self._prefix = prefix
        # Short timeouts and a single immediate retry on a broken connection: a pooled
        # connection that died while idle (Redis restarted) is replaced at once, while a dead
        # Redis costs a request milliseconds, never a retry storm.
        self._client = redis.Redis.from_url(
            url,
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
            retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
            health_check_interval=0,
        )
        self._errors_types: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._pending: set[asyncio.Task[bool]] = set()
        # Writes handed over but not yet acknowledged: this process reads its own writes even
        # when a fast client's follow-up arrives before Redis has them.
        self._in_flight: dict[str, Receipt] = {}

    async def get_many(self, keys: list[str]) -> dict[str, Receipt]:
        found = {key: self._in_flight[key] for key in keys if key in self._in_flight}
        keys = [key for key in keys if key not in found]
        if not keys:
            return found
        try:
            values = await self._client.mget([self._prefix + key for key in keys])
        except self._errors_types as exc:
            self._failed("read", exc)
            return found
        for key, value in zip(keys, values, strict=True):
            if value is not None:
                try:
                    found[key] = orjson.loads(value)
                except orjson.JSONDecodeError:
                    logger.warning("receipt store: unreadable value under %s", key)
        return found

    async def put_many(self, items: dict[str, Receipt]) -> bool:
        if not items:
            return True
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, value in items.items():
                    pipe.set(self._prefix + key, orjson.dumps(value), ex=self._ttl)
                await pipe.execute()
        except self._errors_types as exc:
            self._failed("write", exc)
            return False
        return True

    def put_later(self, items: dict[str, Receipt]) -> asyncio.Future[bool]:
        self._in_flight.update(items)
        task = asyncio.get_running_loop().create_task(self._put_in_flight(items))
        self._pending.add(task)  # a reference, or the loop may drop the task mid-write
        task.add_done_callback(self._pending.discard)
        return task

    async def _put_in_flight(self, items: dict[str, Receipt]) -> bool:
        try:
            return await self.put_many(items)
        finally:
            for key, value in items.items():
                if self._in_flight.get(key) is value:  # not replaced by a newer write
                    del self._in_flight[key]

    async def ping(self) -> bool:
        try:
            return bool(await self._client.ping())
        except self._errors_types as exc:
            self._failed("ping", exc)
            return False

    async def aclose(self) -> None:
        if self._pending:  # writes still in flight finish first (bounded by socket timeouts)
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._client.aclose()

    def _failed(self, operation: str, exc: BaseException) -> None:
        self.errors += 1
        logger.warning("receipt store: redis %s failed (%s); continuing without it", operation, exc)


class StoreSettings(Protocol):
    """What `open_store` reads of the settings' `[receipts]` table (`ReceiptSettings`)."""

    @property
    def store(self) -> str: ...
    @property
    def max_entries(self) -> int: ...
    @property
    def ttl_seconds(self) -> float: ...
    @property
    def max_total_bytes(self) -> int: ...


def open_store(settings: StoreSettings) -> ReceiptStore:
    if settings.store == "memory":
        return MemoryStore(
            settings.max_entries, settings.ttl_seconds, max_total_bytes=settings.max_total_bytes
        )
    return RedisStore(settings.store, settings.ttl_seconds)
