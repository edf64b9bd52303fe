"""A Redis outage under a running `python -m proxy serve`: Redis killed between two exchanges of
a conversation, or paused (a Redis that is slow rather than gone). Every request still gets
its 200 within a bounded time; the log says once that the store stopped answering and once
that it is back; `/readyz` stays 200 and says `"store": false`; `streamfix_store_up` and
`streamfix_store_errors_total` show it; once Redis is back, receipts are kept and put back
again without a restart.

The upstream is tests/support/fake_upstream.py in Gemini's shape (tests/support/
redis_receipts.py): it answers whatever it gets, so what the outage costs shows in what the
follow-up carried, not in a refusal.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream, running_fake_upstream
from tests.support.proxy_process import ServedProxy
from tests.support.redis_receipts import (
    CLIENT_HEADERS,
    SIGNATURE,
    first_request,
    follow_up_request,
    sent_call_signature,
    stream_through,
    wait_for_receipts,
)
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.replicas import replica_config, running_replicas, scraped

REQUEST_BUDGET = 3.0  # seconds for one whole exchange while Redis is down or paused
STOPPED = "does not answer"
BACK = "answers again, after"


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


@pytest.fixture
def proxy(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[FakeUpstream, ServedProxy]]:
    with running_fake_upstream() as (fake, root):
        route = {"name": "gemini", "models": ["*"], "base_url": f"{root}/v1beta/openai"}
        config = replica_config(tmp_path / "streamfix.toml", {"store": redis_server.url}, [route])
        with running_replicas(config, count=1) as (served,):
            yield fake, served


def readiness(served: ServedProxy) -> tuple[int, dict[str, object]]:
    response = httpx.get(f"{served.url}/readyz", timeout=5)
    return response.status_code, response.json()


def exchanges_within_budget(served: ServedProxy) -> None:
    """Streamed and not, calls and follow-ups: each a complete 200 within REQUEST_BUDGET. The
    last is a follow-up (`sent_call_signature` reads it)."""
    started = time.monotonic()
    answered = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={**first_request(), "stream": False},
        headers=CLIENT_HEADERS,
        timeout=15,
    )
    assert answered.status_code == 200, answered.text
    assert time.monotonic() - started < REQUEST_BUDGET
    for body in (first_request(), follow_up_request(), first_request(), follow_up_request()):
        started = time.monotonic()
        stream_through(served.url, body)
        assert time.monotonic() - started < REQUEST_BUDGET


def test_redis_killed_mid_conversation_costs_receipts_never_a_request(
    redis_server: RedisServer, proxy: tuple[FakeUpstream, ServedProxy]
) -> None:
    fake, served = proxy
    assert SIGNATURE.encode() in stream_through(served.url, first_request())
    wait_for_receipts(redis_server)
    assert readiness(served) == (200, {"status": "ready", "store": True})

    assert redis_server.process is not None
    redis_server.process.kill()  # SIGKILL: no goodbye to the proxy's pooled connections
    redis_server.process.wait(timeout=10)
    exchanges_within_budget(served)
    assert sent_call_signature(fake) != SIGNATURE  # the receipt was out of reach
    assert readiness(served) == (200, {"status": "ready", "store": False})
    assert scraped(served.url, "streamfix_store_up") == 0
    assert scraped(served.url, "streamfix_store_errors_total") >= 5
    assert served.stderr.count(STOPPED) == 1, served.stderr
    assert BACK not in served.stderr

    redis_server.start()  # same port, empty
    assert SIGNATURE.encode() in stream_through(served.url, first_request())
    served.wait_for_log(BACK)
    stream_through(served.url, follow_up_request())
    assert sent_call_signature(fake) == SIGNATURE  # kept and put back again
    assert readiness(served) == (200, {"status": "ready", "store": True})
    assert scraped(served.url, "streamfix_store_up") == 1
    assert served.stderr.count(STOPPED) == 1 and served.stderr.count(BACK) == 1


def test_a_paused_redis_costs_each_exchange_a_bounded_wait(
    redis_server: RedisServer, proxy: tuple[FakeUpstream, ServedProxy]
) -> None:
    """SIGSTOP: connections are accepted, nothing answers (an overloaded or partitioned Redis).
    The first operation waits out its deadline; the store is then left alone for a second, so
    the exchanges meanwhile do not wait at all."""
    fake, served = proxy
    stream_through(served.url, first_request())
    wait_for_receipts(redis_server)
    assert redis_server.process is not None
    pid = redis_server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        exchanges_within_budget(served)
        status, body = readiness(served)
        assert (status, body["store"]) == (200, False)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert served.stderr.count(STOPPED) == 1, served.stderr
    # Readiness asks Redis whatever the hold-off says: it finds it back, and says so once.
    served.wait_for(lambda: readiness(served)[1]["store"] is True, "readiness to see Redis", 10)
    served.wait_for_log(BACK)  # the line reaches the process's stderr reader a moment later
    assert served.stderr.count(BACK) == 1, served.stderr
    stream_through(served.url, follow_up_request())
    assert sent_call_signature(fake) == SIGNATURE
