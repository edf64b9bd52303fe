"""The memory store: the bounded in-process LRU (TTL, recency, byte budget)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator

import pytest

from proxy.settings.schema import ReceiptSettings
from proxy.store.memory_store import MemoryStore, entry_bytes
from proxy.store.opening import open_store
from tests.support.redis_server import RedisServer, started_redis_server

# One store call while Redis is down must come back within this (the brief says "~2 s").
OUTAGE_CALL_BUDGET = 2.0


def receipt(signature: str) -> dict:
    return {"extra_content": {"google": {"thought_signature": signature}}}


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


# ── MemoryStore ──────────────────────────────────────────────────────────────


async def test_memory_round_trip_returns_only_found_keys() -> None:
    store = MemoryStore(max_entries=10, ttl_seconds=60)
    await store.put_many({"t:u:call:a": receipt("sigA"), "t:u:call:b": receipt("sigB")})
    found = await store.get_many(["t:u:call:a", "t:u:call:missing", "t:u:call:b"])
    assert found == {"t:u:call:a": receipt("sigA"), "t:u:call:b": receipt("sigB")}
    assert await store.get_many([]) == {}
    assert await store.get_many(["t:u:call:missing"]) == {}
    assert len(store) == 2


async def test_memory_keeps_an_integer_past_64_bits_exactly() -> None:
    """An upstream's receipt may hold one: orjson cannot write it, and the write raised
    TypeError, failing the answer that kept it (a front's stream ended without its terminal)."""
    store = MemoryStore(max_entries=10, ttl_seconds=60)
    items = {"t:u:turn:resp_1": {"message": {"extra_content": {"n": 2**70}, "x": 1.5}}}
    assert await store.put_many(items) is True
    assert await store.get_many(list(items)) == items


async def test_memory_put_replaces_a_value() -> None:
    store = MemoryStore(max_entries=10, ttl_seconds=60)
    await store.put_many({"k": receipt("old")})
    await store.put_many({"k": receipt("new")})
    assert await store.get_many(["k"]) == {"k": receipt("new")}
    assert len(store) == 1


async def test_memory_evicts_least_recently_used_and_a_get_refreshes_recency() -> None:
    store = MemoryStore(max_entries=3, ttl_seconds=60)
    await store.put_many({"a": receipt("A"), "b": receipt("B"), "c": receipt("C")})
    assert await store.get_many(["a"]) == {"a": receipt("A")}  # a is now the most recent
    await store.put_many({"d": receipt("D")})  # evicts b, the least recently used
    assert len(store) == 3
    assert set(await store.get_many(["a", "b", "c", "d"])) == {"a", "c", "d"}
    # That get touched a, c, d in this order, so a is now the least recently used.
    await store.put_many({"e": receipt("E")})
    assert set(await store.get_many(["a", "b", "c", "d", "e"])) == {"c", "d", "e"}


async def test_memory_put_of_an_existing_key_refreshes_recency() -> None:
    store = MemoryStore(max_entries=2, ttl_seconds=60)
    await store.put_many({"a": receipt("A"), "b": receipt("B")})
    await store.put_many({"a": receipt("A2")})
    await store.put_many({"c": receipt("C")})  # b is the least recently used
    assert await store.get_many(["a", "b", "c"]) == {"a": receipt("A2"), "c": receipt("C")}


async def test_memory_expired_entries_are_never_returned() -> None:
    clock = FakeClock()
    store = MemoryStore(max_entries=10, ttl_seconds=10, clock=clock)
    await store.put_many({"old": receipt("old")})
    clock.advance(6)
    await store.put_many({"young": receipt("young")})
    clock.advance(3.9)  # old is 9.9 s old, young 3.9 s
    assert set(await store.get_many(["old", "young"])) == {"old", "young"}
    clock.advance(0.2)  # old is 10.1 s old: expired
    assert await store.get_many(["old", "young"]) == {"young": receipt("young")}
    clock.advance(6)  # young is 10.1 s old
    assert await store.get_many(["old", "young"]) == {}


async def test_memory_a_get_does_not_extend_the_ttl() -> None:
    """Like Redis's SET EX, the time to live runs from the put, whatever reads it."""
    clock = FakeClock()
    store = MemoryStore(max_entries=10, ttl_seconds=10, clock=clock)
    await store.put_many({"k": receipt("s")})
    for _ in range(9):
        clock.advance(1)
        assert await store.get_many(["k"]) == {"k": receipt("s")}
    clock.advance(1.1)
    assert await store.get_many(["k"]) == {}


async def test_memory_a_put_after_expiry_starts_a_new_ttl() -> None:
    clock = FakeClock()
    store = MemoryStore(max_entries=10, ttl_seconds=10, clock=clock)
    await store.put_many({"k": receipt("first")})
    clock.advance(11)
    assert await store.get_many(["k"]) == {}
    await store.put_many({"k": receipt("second")})
    clock.advance(9)
    assert await store.get_many(["k"]) == {"k": receipt("second")}


async def test_memory_stays_at_max_entries_however_many_puts() -> None:
    store = MemoryStore(max_entries=100, ttl_seconds=60)
    for batch in range(50):
        await store.put_many({f"k{batch}-{i}": receipt(f"s{batch}-{i}") for i in range(37)})
        assert len(store) <= 100
    assert len(store) == 100
    # What is left is the newest 100 keys.
    newest = [f"k{b}-{i}" for b in range(50) for i in range(37)][-100:]
    assert set(await store.get_many(newest)) == set(newest)
    # One batch larger than the bound keeps its last max_entries items.
    await store.put_many({f"big{i}": receipt(str(i)) for i in range(250)})
    assert len(store) == 100
    assert set(await store.get_many([f"big{i}" for i in range(250)])) == {
        f"big{i}" for i in range(150, 250)
    }


async def test_memory_ping_and_aclose() -> None:
    store = MemoryStore(max_entries=10, ttl_seconds=60)
    assert await store.ping() is True
    await store.put_many({"k": receipt("s")})
    await store.aclose()
    assert store.errors == 0


def held_by_store(fill: Callable[[MemoryStore], Awaitable[None]], budget: int) -> int:
    """Bytes a `MemoryStore(max_total_bytes=budget)` holds once `fill` ran, as tracemalloc
    measures them (the inputs dropped, only what the store keeps)."""
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        store = MemoryStore(max_entries=10_000_000, ttl_seconds=60, max_total_bytes=budget)
        asyncio.run(fill(store))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0 < store.total_bytes <= budget
    return held


def test_memory_budget_holds_in_memory_for_receipts_with_an_emoji() -> None:
    # A str with one character beyond Latin-1 takes four bytes for every character: 100 KB of
    # reasoning and one emoji took 400 KB while the budget counted 100 KB (1 MB emoji receipts:
    # 1,090 MB for a 400 MB budget). Values are kept as UTF-8 bytes, and counted as held.
    budget = 4_000_000

    async def fill(store: MemoryStore) -> None:
        for n in range(200):
            await store.put_many({f"t:u:turn:{n}": {"reasoning_content": "r" * 100_000 + "😀"}})

    held = held_by_store(fill, budget)
    assert held <= 1.2 * budget, f"{held:,} bytes held for a budget of {budget:,}"


def test_memory_budget_holds_in_memory_for_many_small_receipts() -> None:
    # Counting only the UTF-8 of key and value left out what each entry costs besides (the
    # objects' headers, the tuple, the dict's slots): 3.5 times the budget in small receipts.
    budget = 4_000_000

    async def fill(store: MemoryStore) -> None:
        for n in range(60_000):
            await store.put_many({f"{'0' * 32}:{'1' * 16}:call:{n:08d}": receipt(f"s{n}")})

    held = held_by_store(fill, budget)
    assert held <= 1.2 * budget, f"{held:,} bytes held for a budget of {budget:,}"


async def test_memory_budget_accounting_returns_to_zero() -> None:
    store = MemoryStore(max_entries=3, ttl_seconds=60, max_total_bytes=10_000_000)
    await store.put_many({f"k{i}": receipt("é😀" * i) for i in range(10)})  # evictions
    await store.put_many({"k9": receipt("replaced")})  # a replacement
    assert store.total_bytes == sum(entry_bytes(k, v) for k, (_, v, _) in store._entries.items())
    await store.aclose()
    assert store.total_bytes == 0


async def test_open_store_memory_uses_the_settings() -> None:
    store = open_store(ReceiptSettings(store="memory", max_entries=7, ttl_seconds=5))
    assert isinstance(store, MemoryStore)
    await store.put_many({f"k{i}": receipt(str(i)) for i in range(20)})
    assert len(store) == 7
    await store.aclose()
