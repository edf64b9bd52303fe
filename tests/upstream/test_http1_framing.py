"""Response framing the upstream client gets right, kept right: framing an attacker could use to
desync a pooled connection is refused and the connection dropped, and under a mix of normal and
malformed answers no client ever gets another request's answer.

The upstream is tests/support/keepalive_upstream.py: raw TCP on 127.0.0.1, connections kept
alive, so a framing mistake would show as a later request reading the rest of an earlier answer.
"""

from __future__ import annotations

import asyncio
import random

import httpx
import orjson
import pytest

from tests.support.keepalive_upstream import Answer, KeepAliveUpstream, Received, ok
from tests.support.proxies import running_proxy

SMUGGLING = {
    # Content-Length and Transfer-Encoding together (RFC 9112 §6.3: a smuggling vector).
    "cl-and-te": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"
    b"0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nsmuggled",
    # obs-fold: a field continued on the next line (RFC 9112 §5.2: reject or replace).
    "obs-fold": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\r\n folded\r\n\r\nok",
    "bad-chunk-size": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
    "bare-lf": b"HTTP/1.1 200 OK\ncontent-length: 2\n\nok",
    "two-lengths": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 9\r\n\r\nok",
}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize("answer", list(SMUGGLING.values()), ids=list(SMUGGLING))
def test_ambiguous_framing_is_refused_and_the_connection_dropped(answer: bytes) -> None:
    def script(request: Received) -> Answer:
        if request.connection == 0:
            return Answer([answer], end="keep")
        return Answer([ok(b'{"id":"clean"}')], end="keep")

    with (
        KeepAliveUpstream(script) as upstream,
        running_proxy(f"{upstream.url}/v1") as proxy,
        httpx.Client(timeout=10) as client,
    ):
        refused = client.post(f"{proxy}/v1/chat/completions", json=CHAT)
        after = client.post(f"{proxy}/v1/chat/completions", json=CHAT)
    assert refused.status_code == 502, refused.text
    assert refused.json()["error"]["type"] == "upstream_error"
    # The next request went on a new connection and got its own answer, not a smuggled one.
    assert after.status_code == 200 and after.json() == {"id": "clean"}
    assert [r.connection for r in upstream.received] == [0, 1]


def test_mixed_normal_and_malformed_answers_never_cross_talk() -> None:
    """300 requests, 20 at a time, a third answered with broken framing: every 200 carries the
    marker of its own request, and every broken one is a 502."""
    broken = list(SMUGGLING.values())

    def script(request: Received) -> Answer:
        marker = orjson.loads(request.body)["metadata"]["marker"]
        if marker % 3 == 0:
            return Answer([broken[marker % len(broken)]], end="keep")
        return Answer([ok(orjson.dumps({"id": f"m{marker}"}))], end="keep")

    async def send_all(proxy: str) -> list[tuple[int, httpx.Response]]:
        limits = httpx.Limits(max_connections=20)
        async with httpx.AsyncClient(timeout=20, limits=limits) as client:
            gate = asyncio.Semaphore(20)

            async def one(marker: int) -> tuple[int, httpx.Response]:
                async with gate:
                    body = {**CHAT, "metadata": {"marker": marker}}
                    return marker, await client.post(f"{proxy}/v1/chat/completions", json=body)

            markers = list(range(300))
            random.Random(13).shuffle(markers)
            return await asyncio.gather(*(one(m) for m in markers))

    with KeepAliveUpstream(script) as upstream, running_proxy(f"{upstream.url}/v1") as proxy:
        results = asyncio.run(send_all(proxy))
    for marker, response in results:
        if marker % 3 == 0:
            assert response.status_code == 502, (marker, response.text)
        else:
            assert response.status_code == 200, (marker, response.text)
            assert response.json() == {"id": f"m{marker}"}
    # Each request reached the upstream once: no resend of a broken one.
    assert len(upstream.received) == 300
