"""What the proxy keeps between exchanges, and what every store offers (`Store`): bounded
JSON objects under string keys, each with a time to live. The receipts are kept there
(proxy/repair/repairs/receipts.py), the rules learned from upstreams (proxy/learning/), the
fronts' turns (proxy/fronts/turns.py) and the Responses front's transcripts
(proxy/fronts/responses/store.py), each under its own keys.

Two stores keep it: a bounded in-process LRU (memory_store.py) and Redis, shared by every
replica (redis_store.py); opening.py picks one from the settings. A store failure must never
fail a request: the proxy then just cannot remember this time. Both stores therefore swallow
backend errors (counted, and logged once per outage) instead of raising.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

Value = dict[str, Any]
"""What one key holds: a JSON object."""

MAX_VALUE_BYTES = 1_048_576
"""The largest value kept by default (`[receipts] max_value_bytes`): reasoning texts are large
(DeepSeek's can run to hundreds of kilobytes), but no upstream may grow the store without bound."""


class Store(Protocol):
    @property
    def errors(self) -> int:
        """Operations the backend did not serve (failed, or skipped while it was down)."""
        ...

    @property
    def answering(self) -> bool:
        """False while an outage is on (its last operation failed); no I/O."""
        ...

    async def get_many(self, keys: list[str]) -> dict[str, Value]:
        """The stored values of `keys` (those found). The keys of one call share their hash
        tag (`{scope}:…`, proxy/repair/tenancy.py), so on Redis Cluster a lookup is one slot."""
        ...

    async def put_many(self, items: dict[str, Value]) -> bool:
        """Store; False when the backend failed (counted in `errors`)."""
        ...

    def put_later(self, items: dict[str, Value]) -> asyncio.Future[bool]:
        """Store in the background: the write outlives the request that made it, and whoever
        wants the outcome (was it stored?) can wait for the future without cancelling it."""
        ...

    async def ping(self) -> bool: ...

    async def aclose(self) -> None: ...
