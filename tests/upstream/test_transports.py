"""The live pool: the app sends each request once (when to send twice is the transport's rule,
tests/upstream/test_http1_retries.py) and counts the transport's retries; sharded pools."""

from __future__ import annotations

import logging

import httpx
import pytest

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from proxy.upstream.http1 import RETRIED
from proxy.upstream.transports import ShardedTransport
from tests.support.servers import serve_in_thread

SSE = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


class FlakyTransport(httpx.AsyncBaseTransport):
    """Fails the first `failures` sends the way a connection the upstream dropped does; then
    answers, saying `retried` in the response's extensions when given."""

    def __init__(
        self,
        failures: int,
        error: type[Exception] = httpx.RemoteProtocolError,
        retried: str | None = None,
    ):
        self.failures = failures
        self.error = error
        self.retried = retried
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        if self.sent <= self.failures:
            raise self.error("Server disconnected without sending a response.")
        extensions = {RETRIED: self.retried} if self.retried else {}
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, content=SSE, extensions=extensions)


def post(url: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    return httpx.post(f"{url}/v1/chat/completions", json=body)


@pytest.mark.parametrize("error", [httpx.RemoteProtocolError, httpx.ReadError])
def test_the_app_sends_once_and_a_failure_is_the_clients_answer(error) -> None:
    # Before, the app sent the request once more on any RemoteProtocolError or ReadError: also
    # after the upstream had read it (a reset after reading, a malformed head), so every such
    # chat POST reached the upstream twice. Only the transport can tell those apart.
    transport = FlakyTransport(failures=1, error=error)
    settings = Settings().with_values({"upstream.base_url": "http://127.0.0.1:9/v1"})
    with serve_in_thread(create_app(settings, transport=transport)) as url:
        response = post(url)
        metrics = httpx.get(f"{url}/metrics").text
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_failed"
    assert transport.sent == 1
    assert 'kind="upstream_retried"' not in metrics


def test_a_retry_the_transport_made_is_counted_and_logged(caplog) -> None:
    # The transport's one retry (a reused connection dropped unanswered, an idempotent
    # request) is visible: counted as `upstream_retried` and logged with the transport's reason.
    reason = "the upstream closed a reused connection without a byte of response (test)"
    transport = FlakyTransport(failures=0, retried=reason)
    settings = Settings().with_values({"upstream.base_url": "http://127.0.0.1:9/v1"})
    with (
        caplog.at_level(logging.WARNING, logger="proxy"),
        serve_in_thread(create_app(settings, transport=transport)) as url,
    ):
        response = post(url)
        metrics = httpx.get(f"{url}/metrics").text
    assert response.status_code == 200
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert transport.sent == 1
    assert 'streamfix_repairs_total{kind="upstream_retried",route="default"} 1.0' in metrics
    assert any(reason in record.getMessage() for record in caplog.records)


async def test_sharded_transport_spreads_requests_and_closes_every_shard(monkeypatch) -> None:
    pool = ShardedTransport(shards=3, keepalive_per_shard=1)
    seen: list[int] = []
    closed: list[int] = []
    for number, shard in enumerate(pool._shards):

        async def handle(request, number=number):
            seen.append(number)
            return httpx.Response(204)

        async def aclose(number=number):
            closed.append(number)

        monkeypatch.setattr(shard, "handle_async_request", handle)
        monkeypatch.setattr(shard, "aclose", aclose)
    for _ in range(6):
        await pool.handle_async_request(httpx.Request("GET", "http://127.0.0.1:9/"))
    await pool.aclose()
    assert seen == [0, 1, 2, 0, 1, 2]
    assert closed == [0, 1, 2]


def test_both_upstream_clients_relay_the_same_bytes() -> None:
    """`server.upstream_client = "httpx"` is the documented fallback: it must answer exactly as
    the default client does, streamed and not, repaired and passed through."""
    from tests.support.fake_upstream import running_fake_upstream
    from tests.support.proxies import running_proxy

    answers: dict[str, list[bytes]] = {}
    with running_fake_upstream() as (_, root):
        for client in ("http1", "httpx"):
            with running_proxy(f"{root}/v1", **{"server.upstream_client": client}) as proxy:
                got = []
                for name, stream in [
                    ("gemini_indexless_fragmented_parallel", True),
                    ("openai_text_multibyte_utf8", True),
                    ("openai_indexed_fragmented", False),
                ]:
                    body = {
                        "model": name,
                        "stream": stream,
                        "messages": [{"role": "user", "content": "x"}],
                    }
                    response = httpx.post(f"{proxy}/v1/chat/completions", json=body)
                    assert response.status_code == 200
                    got.append(response.content)
                models = httpx.get(f"{proxy}/v1/models")
                got.append(models.content)
                answers[client] = got
    assert answers["http1"] == answers["httpx"]
    assert all(answers["http1"])
