"""The real proxy with `signatures.store = "redis://…"` against a real redis-server.

- Restart: a signature captured by one proxy is injected by the next one (a new app, a new
  store, the same Redis), and only because Redis had it.
- Outage: with Redis down, requests still go through, complete; once it is back, capture and
  injection resume without restarting the proxy.

The upstream is tests/support/fake_upstream.py in Gemini's shape (`/v1beta/openai`); the model names
contain "gemini", so Google's rules apply to a 127.0.0.1 upstream. Receipts are written at the
end of an exchange, after the stream went out, so the tests poll Redis (bounded) for the write
before sending the follow-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.support.fake_upstream import FakeUpstream, running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.redis_receipts import (
    CALL_ID,
    CLIENT_HEADERS,
    SIGNATURE,
    first_request,
    follow_up_request,
    redis_keys,
    sent_call_signature,
    stream_through,
    wait_for_receipts,
)
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.waiting import wait_until

OUTAGE_REQUEST_BUDGET = 5.0  # seconds for one whole request while Redis is down


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


@pytest.fixture
def gemini_upstream() -> Iterator[tuple[FakeUpstream, str]]:
    """The fake upstream and its Gemini-style base URL."""
    with running_fake_upstream() as (fake, root):
        yield fake, f"{root}/v1beta/openai"


# ── requests ─────────────────────────────────────────────────────────────────


def capture_then_follow_up(fake: FakeUpstream, proxy: str, server: RedisServer) -> str | None:
    """One exchange that issues the signed call, wait for its receipt, then the follow-up."""
    body = stream_through(proxy, first_request())
    assert SIGNATURE.encode() in body  # the client got the call with its signature
    wait_for_receipts(server)
    stream_through(proxy, follow_up_request())
    return sent_call_signature(fake)


# ── tests ────────────────────────────────────────────────────────────────────


def test_signature_captured_before_a_proxy_restart_is_injected_after_it(
    redis_server: RedisServer, gemini_upstream: tuple[FakeUpstream, str]
) -> None:
    fake, base_url = gemini_upstream
    config = {"signatures.store": redis_server.url}

    with running_proxy(base_url, **config) as proxy_a:
        body = stream_through(proxy_a, first_request())
        assert SIGNATURE.encode() in body
        keys = wait_for_receipts(redis_server)
    assert all(key.startswith(b"streamfix:") for key in keys), keys
    with redis.Redis.from_url(redis_server.url) as client:
        assert all(client.ttl(key) > 0 for key in keys)

    # Proxy A is gone (its server stopped, its lifespan closed its store). B is a new app
    # with a new store on the same Redis, and has never seen the call.
    with running_proxy(base_url, **config) as proxy_b:
        stream_through(proxy_b, follow_up_request())
    assert sent_call_signature(fake) == SIGNATURE

    # Control: with Redis emptied, a third proxy cannot know the signature, so the one B
    # injected came from Redis and from nowhere else.
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    with running_proxy(base_url, **config) as proxy_c:
        stream_through(proxy_c, follow_up_request())
    assert sent_call_signature(fake) != SIGNATURE


def test_redis_outage_requests_succeed_and_capture_resumes(
    redis_server: RedisServer,
    gemini_upstream: tuple[FakeUpstream, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake, base_url = gemini_upstream
    with running_proxy(base_url, **{"signatures.store": redis_server.url}) as proxy:
        # Working normally first.
        assert capture_then_follow_up(fake, proxy, redis_server) == SIGNATURE

        redis_server.stop()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            for body in (first_request(), follow_up_request(), first_request()):
                started = time.monotonic()
                stream_through(proxy, body)
                assert time.monotonic() - started < OUTAGE_REQUEST_BUDGET
            started = time.monotonic()
            response = httpx.post(
                f"{proxy}/v1/chat/completions",
                json={**first_request(), "stream": False},
                headers=CLIENT_HEADERS,
                timeout=15,
            )
            assert response.status_code == 200, response.text
            assert response.json()["choices"][0]["message"]["tool_calls"][0]["id"] == CALL_ID
            assert time.monotonic() - started < OUTAGE_REQUEST_BUDGET
            wait_until(  # the end-of-exchange writes fail and log
                lambda: any(
                    record.levelno == logging.WARNING and "redis" in record.getMessage().lower()
                    for record in caplog.records
                ),
                "a warning about redis in the log",
            )

        # Back on the same port, empty (nothing is persisted): whatever the next follow-up
        # gets was captured after the outage, through the same proxy and the same store.
        redis_server.start()
        assert redis_keys(redis_server) == []
        assert capture_then_follow_up(fake, proxy, redis_server) == SIGNATURE


def test_proxy_started_while_redis_is_down_serves_and_captures_once_it_is_up(
    redis_server: RedisServer, gemini_upstream: tuple[FakeUpstream, str]
) -> None:
    """A replica that starts before Redis does must not fail its start-up or its requests."""
    fake, base_url = gemini_upstream
    redis_server.stop()
    with running_proxy(base_url, **{"signatures.store": redis_server.url}) as proxy:
        stream_through(proxy, first_request())
        stream_through(proxy, follow_up_request())
        redis_server.start()
        assert capture_then_follow_up(fake, proxy, redis_server) == SIGNATURE
