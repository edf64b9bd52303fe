"""What upstreams refused, remembered per upstream and model: so a later request goes without
it at once instead of being refused again."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from proxy.repair.receipts.store import MemoryStore, ReceiptStore, RedisStore
from proxy.settings.schema import Settings
from proxy.wire import json_codec

KEY_PREFIX = "streamfix:parameters:"
"""The Redis namespace, apart from the receipts'. Named for its first rule, and kept: replicas
of an older build read the same entries."""


MODEL_SHOWN = 200
"""The most of a model's name kept beside what was learned for it."""


class RefusalMemory:
    """One entry per (upstream, model, key), in a receipt store's shape with the store's TTL:
    Redis shares them between replicas, the memory store is bounded. A key is what a refusal
    rule remembers (a parameter's name); rules other than the parameters' put a `:` in theirs,
    which no parameter name has, so no two rules share an entry."""

    def __init__(self, store: ReceiptStore, ttl_seconds: float) -> None:
        self.store = store
        self.ttl_seconds = ttl_seconds

    @staticmethod
    def key(identity: str, model: object, name: str) -> str:
        # The model name is the client's text: hashed, so no key grows with it.
        digest = hashlib.sha256(str(model).encode()).hexdigest()[:16]
        return f"{identity}:{digest}:{name}"

    async def recall_keys(self, identity: str, model: object, names: list[str]) -> set[str]:
        """Which of `names` were remembered for this upstream and model (one store lookup)."""
        if not names:
            return set()
        keys = {self.key(identity, model, name): name for name in names}
        found = await self.store.get_many(list(keys))
        return {keys[key] for key in found}

    def remember(self, identity: str, model: object, names: Iterable[str], status: int) -> None:
        # The model in words beside the status, for `streamfix config` (the key holds a digest).
        said = {"status": status, "model": str(model)[:MODEL_SHOWN]}
        self.store.put_later({self.key(identity, model, name): said for name in names})

    async def aclose(self) -> None:
        await self.store.aclose()


def open_memory(settings: Settings) -> RefusalMemory:
    """In the receipts' store (`[receipts] store`), under its own keys and `[parameters]`
    bounds."""
    bounds = settings.parameters
    if settings.receipts.store == "memory":
        store: ReceiptStore = MemoryStore(bounds.max_entries, bounds.ttl_seconds)
    else:
        store = RedisStore(settings.receipts.store, bounds.ttl_seconds, prefix=KEY_PREFIX)
    return RefusalMemory(store, bounds.ttl_seconds)


def learned_in_redis(url: str, identity: str) -> list[str] | None:
    """What the replicas sharing this Redis learned for one upstream, as `key (model, status)`
    lines for `streamfix config`; None when Redis does not answer. Synchronous: the CLI's."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    prefix = f"{KEY_PREFIX}{identity}:"
    try:
        keys = sorted(client.scan_iter(match=prefix + "*", count=1000))
        values = client.mget(keys) if keys else []
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()
    shown = []
    for key, value in zip(keys, values, strict=True):
        name = key.decode("utf-8", "replace")[len(prefix) :].partition(":")[2]
        try:
            said = json_codec.loads(value) if value is not None else {}
        except json_codec.JSONDecodeError:
            said = {}
        model = said.get("model", "a model") if isinstance(said, dict) else "a model"
        status = said.get("status", "?") if isinstance(said, dict) else "?"
        how = "answered" if status == 200 else "refused"  # an answer rule's (answer_rules.py)
        shown.append(f"{name} (model {model}, {how} with {status})")
    return shown
