"""The Redis store against a real redis-server.

A store failure must never fail a request, so the tests take the server away mid-test (or
pause it, for a Redis that is slow rather than gone) and check that every call still returns,
quickly, that the outage is logged once and its end once, and that the same store object works
again once the server is back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Iterator

import orjson
import pytest
import redis

from proxy.settings.schema import ReceiptSettings
from proxy.store.opening import open_store
from proxy.store.redis_connection import RedisOptions
from proxy.store.redis_store import RedisStore
from tests.support.redis_server import RedisServer, started_redis_server

# One store call while Redis is down must come back within this.
OUTAGE_CALL_BUDGET = 2.0


def receipt(signature: str) -> dict:
    return {"extra_content": {"google": {"thought_signature": signature}}}


def opened(url: str, ttl_seconds: float = 60, prefix: str = "streamfix:") -> RedisStore:
    return RedisStore.open(RedisOptions(url), ttl_seconds, prefix)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


async def test_redis_round_trip_stores_json_under_the_prefix(redis_server: RedisServer) -> None:
    store = opened(redis_server.url, 60, "sfx-test:")
    try:
        items = {
            "tenant:upstream:call:623rbkd0": receipt("EjQKMgG+Pvb7s6anNtqTZtb1XVK5Rf2ed"),
            "tenant:upstream:text:9f86d081884c7d65": receipt("sig123"),
            "tenant:upstream:call:ünïcødé": {"nested": [1, 2.5, None, True, "x"]},
        }
        await store.put_many(items)
        keys = [*items, "tenant:upstream:call:missing"]
        assert await store.get_many(keys) == items
        assert await store.get_many([]) == {}
        await store.put_many({})
        assert await store.ping() is True
        assert store.errors == 0
    finally:
        await store.aclose()

    with redis.Redis.from_url(redis_server.url) as client:
        raw = client.get("sfx-test:tenant:upstream:call:623rbkd0")
        assert raw is not None
        assert orjson.loads(raw) == items["tenant:upstream:call:623rbkd0"]
        assert sorted(client.keys("*")) == sorted(f"sfx-test:{k}".encode() for k in items)


async def test_redis_keeps_an_integer_past_64_bits_exactly(redis_server: RedisServer) -> None:
    """An upstream's receipt may hold one (a signature, a `reasoning_details` index): orjson
    cannot write it, and the write raised TypeError, failing the answer that kept it."""
    store = opened(redis_server.url)
    try:
        items = {"t:u:turn:resp_1": {"message": {"extra_content": {"n": 2**70}, "x": 1.5}}}
        assert await store.put_many(items) is True
        assert await store.get_many(list(items)) == items
    finally:
        await store.aclose()


async def test_redis_default_prefix_is_streamfix(redis_server: RedisServer) -> None:
    store = opened(redis_server.url, 60)
    try:
        await store.put_many({"k": receipt("s")})
    finally:
        await store.aclose()
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.keys("*") == [b"streamfix:k"]


async def test_redis_every_key_gets_the_ttl(redis_server: RedisServer) -> None:
    store = opened(redis_server.url, 120)
    try:
        await store.put_many({f"t:u:call:{i}": receipt(f"s{i}") for i in range(25)})
        await store.put_many({"t:u:call:0": receipt("replaced")})  # a rewrite keeps a TTL too
    finally:
        await store.aclose()
    with redis.Redis.from_url(redis_server.url) as client:
        keys = client.keys("streamfix:*")
        assert len(keys) == 25
        for key in keys:
            ttl = client.ttl(key)
            assert 0 < ttl <= 120, (key, ttl)


async def test_redis_outage_never_raises_counts_errors_and_recovers(
    redis_server: RedisServer,
) -> None:
    store = opened(redis_server.url, 60)
    try:
        await store.put_many({"before": receipt("before")})
        assert await store.get_many(["before"]) == {"before": receipt("before")}
        assert store.errors == 0

        redis_server.stop()
        for attempt in range(3):
            errors = store.errors
            started = time.monotonic()
            assert await store.get_many(["before", "other"]) == {}
            assert time.monotonic() - started < OUTAGE_CALL_BUDGET, attempt
            assert store.errors > errors

            errors = store.errors
            started = time.monotonic()
            assert await store.put_many({f"during{attempt}": receipt("x")}) is False
            assert time.monotonic() - started < OUTAGE_CALL_BUDGET, attempt
            assert store.errors > errors

        started = time.monotonic()
        assert await store.ping() is False
        assert time.monotonic() - started < OUTAGE_CALL_BUDGET

        # Back, on the same port and empty (nothing is persisted): the same store object
        # works again from its very next call, without being recreated.
        redis_server.start()
        errors = store.errors
        await store.put_many({"after": receipt("after")})
        assert await store.get_many(["after", "before"]) == {"after": receipt("after")}
        assert await store.ping() is True
        assert store.errors == errors
    finally:
        await store.aclose()


async def test_redis_unreachable_from_the_start_is_not_fatal() -> None:
    """A store opened while Redis is down (a replica starting first) neither raises nor hangs."""
    server = RedisServer()  # a port with nobody listening: never started
    store = opened(server.url, 60)
    try:
        started = time.monotonic()
        assert await store.get_many(["k"]) == {}
        await store.put_many({"k": receipt("s")})
        assert await store.ping() is False
        assert time.monotonic() - started < 3 * OUTAGE_CALL_BUDGET
        assert store.errors >= 2
    finally:
        await store.aclose()
        server.close()


async def test_open_store_redis_url(redis_server: RedisServer) -> None:
    store = open_store(ReceiptSettings(store=redis_server.url, ttl_seconds=30))
    try:
        assert isinstance(store, RedisStore)
        assert await store.ping() is True
        await store.put_many({"k": receipt("s")})
    finally:
        await store.aclose()
    with redis.Redis.from_url(redis_server.url) as client:
        assert 0 < client.ttl("streamfix:k") <= 30


async def test_redis_restart_while_idle_loses_no_call(redis_server: RedisServer) -> None:
    """Redis restarts (or drops idle connections) between two exchanges: the pooled
    connection is stale, and the next call must still reach the server that is back."""
    store = opened(redis_server.url, 60)
    try:
        await store.put_many({"before": receipt("before")})
        redis_server.stop()
        redis_server.start()  # no store call while it was down
        await store.put_many({"after": receipt("after")})
        assert await store.get_many(["after"]) == {"after": receipt("after")}
        assert store.errors == 0
    finally:
        await store.aclose()


async def test_redis_reads_its_own_writes_before_redis_has_them(redis_server: RedisServer) -> None:
    # A fast client's follow-up can arrive before the background write lands in Redis.
    store = opened(redis_server.url, 60, "sfx-own:")
    receipt = {"reasoning_content": "thought"}
    store.put_later({"k": receipt})
    assert await store.get_many(["k", "other"]) == {"k": receipt}
    await store.aclose()  # waits for the write
    assert store._in_flight == {}  # acknowledged writes leave the in-flight table
    reader = opened(redis_server.url, 60, "sfx-own:")
    assert await reader.get_many(["k"]) == {"k": receipt}  # and it did land
    await reader.aclose()


# ── outages: logged once, bounded, recovered ─────────────────────────────────

HEALTH_LOGGER = "proxy.store.health"


def health_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == HEALTH_LOGGER]


async def test_an_outage_is_one_warning_and_its_end_one_line_for_every_store_on_it(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = opened(redis_server.url, 60)
    learned = store.sibling(60, "streamfix:learned:")  # the learned rules' store
    caplog.set_level(logging.INFO, HEALTH_LOGGER)
    try:
        await store.put_many({"k": receipt("s")})
        redis_server.stop()
        for _ in range(5):
            assert await store.get_many(["k"]) == {}
            assert await learned.put_many({"rule": {"status": 400}}) is False
            assert await store.ping() is False
        assert store.errors == learned.errors == 15  # one count for the connection
        assert store.answering is False
        warnings = [r for r in health_records(caplog) if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in health_records(caplog)]
        assert redis_server.url.rpartition("/")[0] in warnings[0].getMessage()

        redis_server.start()
        await store.put_many({"k": receipt("again")})
        assert await learned.get_many(["rule"]) == {}
        assert store.answering is True
        said = [(r.levelno, r.getMessage()) for r in health_records(caplog)]
        assert [level for level, _ in said] == [logging.WARNING, logging.INFO], said
        assert "answers again" in said[1][1] and "15 operations not served" in said[1][1]

        redis_server.stop()  # a second outage is a second warning
        assert await store.get_many(["k"]) == {}
        assert len([r for r in health_records(caplog) if r.levelno == logging.WARNING]) == 2
    finally:
        await learned.aclose()
        await store.aclose()


async def test_a_paused_redis_costs_one_timeout_then_is_held_off_until_a_probe_answers(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGSTOP: the kernel still accepts connections, nothing answers: a slow Redis."""
    store = opened(redis_server.url, 60)
    caplog.set_level(logging.INFO, HEALTH_LOGGER)
    assert redis_server.process is not None
    pid = redis_server.process.pid
    try:
        await store.put_many({"k": receipt("s")})
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert await store.get_many(["k"]) == {}  # waits for its deadline, no longer
            assert time.monotonic() - started < OUTAGE_CALL_BUDGET
            errors = store.errors
            started = time.monotonic()
            for _ in range(20):  # held off: skipped at once, counted
                assert await store.get_many(["k"]) == {}
                assert await store.put_many({"k2": receipt("x")}) is False
            assert time.monotonic() - started < OUTAGE_CALL_BUDGET
            assert store.errors == errors + 40
        finally:
            os.kill(pid, signal.SIGCONT)
        # The first call past the hold-off is the probe, and finds Redis back.
        deadline = time.monotonic() + 10
        while await store.get_many(["k"]) != {"k": receipt("s")}:
            assert time.monotonic() < deadline, "the store never tried Redis again"
            await asyncio.sleep(0.1)
        said = [r.levelno for r in health_records(caplog)]
        assert said == [logging.WARNING, logging.INFO], said
    finally:
        await store.aclose()
