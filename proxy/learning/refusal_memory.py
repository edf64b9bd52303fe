"""What upstreams refused, remembered per upstream and model: so a later request goes without
it at once instead of being refused again."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from proxy.settings.schema import Settings
from proxy.store.memory_store import MemoryStore
from proxy.store.protocol import Store, Value
from proxy.store.redis_connection import RedisOptions, redis_client
from proxy.store.redis_store import RedisStore
from proxy.wire import json_codec

KEY_PREFIX = "streamfix:learned:"
"""The Redis namespace, apart from the receipts'. Builds before this one kept their entries,
keyed without a hash tag, under `streamfix:parameters:`: they are not read, so an upgrade
relearns each rule once (one refusal per upstream and model), and the old keys expire by TTL."""


MODEL_SHOWN = 200
"""The most of a model's name kept beside what was learned for it."""


VALUE_SEPARATOR = "="
"""Between a key's name and the value it carries (`max_tokens_limit=8192`): a character no
parameter name or request rule's key has."""


class RefusalMemory:
    """One entry per (upstream, model, key), in a store (proxy/store/) with its TTL:
    Redis shares them between replicas, the memory store is bounded. A key is what a refusal
    rule remembers (a parameter's name); rules other than the parameters' put a `:` in theirs,
    which no parameter name has, so no two rules share an entry. A key may carry a value, a
    number the refusal said (`max_tokens_limit=8192`): the entry is its name's, the value kept
    beside the status, and a recall gives the key back whole."""

    def __init__(self, store: Store, ttl_seconds: float) -> None:
        self.store = store
        self.ttl_seconds = ttl_seconds

    @staticmethod
    def key(identity: str, model: object, name: str) -> str:
        # The model name is the client's text: hashed, so no key grows with it. Upstream and
        # model are the hash tag: one recall's keys are one Redis Cluster slot.
        digest = hashlib.sha256(str(model).encode()).hexdigest()[:16]
        return f"{{{identity}:{digest}}}:{name}"

    async def recall_keys(self, identity: str, model: object, names: list[str]) -> set[str]:
        """Which of `names` were remembered for this upstream and model (one store lookup),
        each with the value it was remembered with (`name=value`), if any."""
        found = await self.recall_values(identity, model, names)
        return {with_value(name, said) for name, said in found.items()}

    async def recall_values(
        self, identity: str, model: object, names: list[str]
    ) -> dict[str, Value]:
        """What was remembered under `names` for this upstream and model, by name (one store
        lookup)."""
        if not names:
            return {}
        keys = {self.key(identity, model, name): name for name in names}
        found = await self.store.get_many(list(keys))
        return {keys[key]: value for key, value in found.items()}

    def remember(self, identity: str, model: object, names: Iterable[str], status: int) -> None:
        # The model in words beside the status, for `streamfix config` (the key holds a digest).
        said: dict[str, Any] = {"status": status, "model": str(model)[:MODEL_SHOWN]}
        entries: dict[str, dict[str, Any]] = {}
        for key in names:
            name, separator, value = key.partition(VALUE_SEPARATOR)
            entry = {**said, "value": value} if separator else said
            entries[self.key(identity, model, name)] = entry
        self.store.put_later(entries)

    async def aclose(self) -> None:
        await self.store.aclose()


def key_name(key: str) -> str:
    """The name a key is remembered under: itself, or the part before its value."""
    return key.partition(VALUE_SEPARATOR)[0]


def with_value(name: str, said: object) -> str:
    value = said.get("value") if isinstance(said, dict) else None
    return f"{name}{VALUE_SEPARATOR}{value}" if isinstance(value, str) and value else name


def open_memory(settings: Settings, shared: Store) -> RefusalMemory:
    """Beside what the app's store keeps (receipts, the fronts' state), under its own keys and
    `[parameters]` bounds: on Redis, on that store's very connection (one pool, one outage,
    logged once)."""
    bounds = settings.parameters
    store: Store
    if isinstance(shared, RedisStore):
        store = shared.sibling(bounds.ttl_seconds, KEY_PREFIX)
    else:
        store = MemoryStore(bounds.max_entries, bounds.ttl_seconds)
    return RefusalMemory(store, bounds.ttl_seconds)


def learned_in_redis(options: RedisOptions, identity: str) -> list[str] | None:
    """What the replicas sharing this Redis learned for one upstream, as `key (model, status)`
    lines for `streamfix config`; None when Redis does not answer. Synchronous: the CLI's."""
    import redis
    import redis.exceptions

    pattern = f"{KEY_PREFIX}{{{identity}:*"
    try:
        client, helpers = redis_client(options, sync=True)
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError):
        return None
    try:
        keys = sorted(client.scan_iter(match=pattern, count=1000))
        # One GET each, pipelined: the entries of several models are several Cluster slots.
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
        values = pipe.execute() if keys else []
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError):
        return None
    finally:
        client.close()
        for helper in helpers:
            helper.close()
    shown = []
    for key, value in zip(keys, values, strict=True):
        # streamfix:learned:{identity:digest}:name
        name = key.decode("utf-8", "replace").partition("}:")[2]
        try:
            said = json_codec.loads(value) if value is not None else {}
        except json_codec.JSONDecodeError:
            said = {}
        name = with_value(name, said)
        model = said.get("model", "a model") if isinstance(said, dict) else "a model"
        status = said.get("status", "?") if isinstance(said, dict) else "?"
        how = "answered" if status == 200 else "refused"  # an answer rule's (answer_rules.py)
        shown.append(f"{name} (model {model}, {how} with {status})")
    return shown
