"""The store in Redis, shared by every replica: JSON strings under a prefix, each with the TTL.

A Redis that is down or slow costs what the exchanges in that window would have kept or found,
never the exchanges: each operation is bounded (`RedisOptions.deadline_seconds`), a failure
returns "nothing found" or "not stored", and the connection's StoreHealth counts it and says
once that an outage started and once that it ended.
"""

from __future__ import annotations

import asyncio
import logging

from proxy.store.protocol import Value
from proxy.store.redis_connection import RedisConnection, RedisOptions
from proxy.wire import json_codec

logger = logging.getLogger(__name__)

PREFIX = "streamfix:"


class RedisStore:
    """Values as JSON under `prefix` with the TTL, on a connection other stores may share."""

    def __init__(
        self, connection: RedisConnection, ttl_seconds: float, prefix: str = PREFIX
    ) -> None:
        self._connection = connection.use()
        self._health = connection.health
        self._ttl = max(1, int(ttl_seconds))
        self._prefix = prefix
        self._pending: set[asyncio.Task[bool]] = set()
        # Writes handed over but not yet acknowledged: this process reads its own writes even
        # when a fast client's follow-up arrives before Redis has them.
        self._in_flight: dict[str, Value] = {}

    @classmethod
    def open(cls, options: RedisOptions, ttl_seconds: float, prefix: str = PREFIX) -> RedisStore:
        return cls(RedisConnection(options), ttl_seconds, prefix)

    @property
    def errors(self) -> int:
        """Operations not served, by any store on this connection."""
        return self._health.errors

    @property
    def answering(self) -> bool:
        return not self._health.down

    def sibling(self, ttl_seconds: float, prefix: str) -> RedisStore:
        """Another store on the same connection (one pool, one outage), under its own keys."""
        return RedisStore(self._connection, ttl_seconds, prefix)

    async def get_many(self, keys: list[str]) -> dict[str, Value]:
        found = {key: self._in_flight[key] for key in keys if key in self._in_flight}
        keys = [key for key in keys if key not in found]
        if not keys or not self._health.may_try():
            return found
        try:
            values = await self._connection.read([self._prefix + key for key in keys])
        except self._connection.failures as exc:
            self._failed("read", exc)
            return found
        self._health.answered()
        for key, value in zip(keys, values, strict=True):
            if value is not None:
                try:
                    found[key] = json_codec.loads(value)
                except json_codec.JSONDecodeError:
                    logger.warning("receipt store: unreadable value under %s", key)
        return found

    async def put_many(self, items: dict[str, Value]) -> bool:
        if not items:
            return True
        if not self._health.may_try():
            return False
        encoded = {self._prefix + key: json_codec.dumps(value) for key, value in items.items()}
        try:
            await self._connection.write(encoded, self._ttl)
        except self._connection.failures as exc:
            self._failed("write", exc)
            return False
        self._health.answered()
        return True

    def put_later(self, items: dict[str, Value]) -> asyncio.Future[bool]:
        self._in_flight.update(items)
        task = asyncio.get_running_loop().create_task(self._put_in_flight(items))
        self._pending.add(task)  # a reference, or the loop may drop the task mid-write
        task.add_done_callback(self._pending.discard)
        return task

    async def _put_in_flight(self, items: dict[str, Value]) -> bool:
        try:
            return await self.put_many(items)
        finally:
            for key, value in items.items():
                if self._in_flight.get(key) is value:  # not replaced by a newer write
                    del self._in_flight[key]

    async def ping(self) -> bool:
        """Asks Redis whatever the outage's hold-off says: readiness wants the truth now."""
        try:
            answered = await self._connection.ping()
        except self._connection.failures as exc:
            self._failed("ping", exc)
            return False
        self._health.answered()
        return answered

    async def aclose(self) -> None:
        if self._pending:  # writes still in flight finish first (each bounded by its deadline)
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._connection.release()

    def _failed(self, operation: str, exc: BaseException) -> None:
        timed_out = isinstance(exc, self._connection.timeouts)
        self._health.failed(f"redis {operation}", exc, timed_out=timed_out)
