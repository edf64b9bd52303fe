"""The streaming hot path end to end (proxy/upstream/http1*.py, proxy/server/streamed_response.py,
proxy/server/asgi.py): out-of-range statuses, clients leaving mid-stream, shutdown, TLS slow
readers and idle TLS connections, error bodies and the pool, over real sockets. The proxy runs
under a real uvicorn; upstreams are raw servers.

Each test says in a comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from typing import Any

import httpx
import pytest
import uvicorn

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from proxy.upstream.http1 import Http1Transport
from tests.support.loops import client_context, server_context
from tests.support.openai_errors import assert_openai_error
from tests.support.raw_upstream import LAST_CHUNK, Reply, http_chunk, http_head, raw_upstream
from tests.support.scripted_servers import (
    Peer,
    Server,
    body_connection,
    fetch,
    fetch_all,
    get,
    idle_count,
    ok,
)
from tests.support.servers import free_port, serving_in_thread
from tests.support.waiting import until, wait_until

EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
STREAM = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}'


def settings_for(upstream_url: str) -> Settings:
    return Settings().with_values({"upstream.base_url": f"{upstream_url}/v1"})


class Probe:
    """ASGI wrapper that notes how the app's call ended for each HTTP request: whether it raised,
    the task's pending cancel requests, and whether a cancellation was still due afterwards."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ends: list[tuple[str, int]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        task = asyncio.current_task()
        assert task is not None
        try:
            await self.app(scope, receive, send)
        except BaseException as exc:
            self.ends.append((type(exc).__name__, task.cancelling()))
            raise
        cancelling = task.cancelling()
        try:
            await asyncio.sleep(0)  # what uvicorn's next await would meet
        except asyncio.CancelledError:
            self.ends.append(("cancellation leaked", cancelling))
            raise
        self.ends.append(("returned", cancelling))


def post_and_leave(url: str, after: bytes) -> None:
    """A streaming chat request on a raw socket, closed once `after` has arrived."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(STREAM), STREAM)
        )
        received = b""
        while after not in received:
            data = sock.recv(65536)
            assert data, "the proxy closed the connection first"
            received += data


# ── the upstream's status line ───────────────────────────────────────────────


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("status", [b"099", b"000", b"600"])
def test_a_status_outside_100_to_599_is_a_502_not_a_dropped_connection(
    status: bytes, stream: bool
) -> None:
    # httptools takes any three digits as a status. Without the check in on_headers_complete the
    # proxy hands e.g. 99 to uvicorn, whose status table stops at 599: KeyError in
    # `http.response.start`, the client's connection dropped with no answer (and on the stream
    # path the upstream response is never closed: the body generator never started). httpx's
    # transport refused 000 and 099 as a RemoteProtocolError, which the proxy answers with 502.
    head = f"HTTP/1.1 {status.decode()} Odd\r\ncontent-type: text/event-stream\r\n".encode()
    reply = Reply(pieces=[head + b"content-length: 2\r\n\r\n{}"])
    with (
        raw_upstream(reply) as upstream,
        serving_in_thread(create_app(settings_for(upstream.url))) as proxy,
    ):
        response = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "m", "stream": stream, "messages": []},
            timeout=5,
        )
    assert_openai_error(response, 502, "upstream_failed")


def test_the_client_rejects_an_out_of_range_status_and_closes_the_connection(run) -> None:
    # The same at the transport: a RemoteProtocolError, and the connection is not pooled.
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok")
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            with pytest.raises(httpx.RemoteProtocolError, match="status 99"):
                await fetch(transport, get(server.url))
            async with asyncio.timeout(3):
                await server.peers[0].closed.wait()
            assert idle_count(transport) == 0

    run(main())


# ── the stream's task: a client leaving, a server shutting down ──────────────


def test_a_client_leaving_mid_stream_leaves_no_cancellation_pending_for_uvicorn() -> None:
    # StreamedResponse cancels the request task itself when the client leaves, then uncancels it.
    # Without the uncancel (or with a cancel requested outside the try) the task would go back
    # to uvicorn with a cancellation due: its next await raises CancelledError, logged as an
    # "Exception in ASGI application", or a later asyncio.timeout misreads its own expiry.
    reply = Reply(pieces=[http_head(), *(http_chunk(EVENT) for _ in range(40))], pause=0.02)
    with raw_upstream(reply) as upstream:
        probe = Probe(create_app(settings_for(upstream.url)))
        with serving_in_thread(probe) as proxy:
            for _ in range(3):
                post_and_leave(proxy.url, after=b"data: ")
            wait_until(lambda: len(probe.ends) == 3, "the three requests ended", timeout=2)
    assert probe.ends == [("returned", 0)] * 3


def test_a_shutdown_cancelling_a_stream_is_not_taken_for_the_client_leaving() -> None:
    # uvicorn cancels streams still running when its graceful shutdown times out. That
    # cancellation must get through (StreamedResponse re-raises unless the client left), and the
    # stream's bookkeeping must still run: without it the active-streams gauge stays at 1.
    reply = Reply(pieces=[http_head(), *(http_chunk(EVENT) for _ in range(100))], pause=0.02)
    with raw_upstream(reply) as upstream:
        app = create_app(settings_for(upstream.url))
        probe = Probe(app)
        port = free_port()
        config = uvicorn.Config(
            probe, host="127.0.0.1", port=port, log_level="critical", timeout_graceful_shutdown=0.2
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until(lambda: server.started, "uvicorn started", timeout=5)
        with httpx.Client(timeout=5) as client:
            body = {"model": "m", "stream": True, "messages": []}
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            with client.stream("POST", url, json=body) as response:
                pieces = response.iter_raw()
                assert next(pieces).startswith(b"data: ")
                server.should_exit = True
                with pytest.raises(httpx.HTTPError):
                    for _ in pieces:
                        pass
        thread.join(5)
        assert not thread.is_alive()
    assert probe.ends == [("CancelledError", 1)]
    assert app.state.proxy.metrics.active_streams._value.get() == 0


# ── TLS transports ───────────────────────────────────────────────────────────


@pytest.mark.parametrize("framing", ["content-length", "close-delimited"])
def test_tls_slow_reader_pauses_and_resumes_and_gets_every_byte(run, ca, framing: str) -> None:
    # pause_reading()/resume_reading() on asyncio's and uvloop's SSL transports (their own
    # classes, with their own read buffers): without resume the slow reader stalls into a read
    # timeout; with bytes lost the payload differs; unbalanced bookkeeping breaks the reuse.
    payload = random.Random(11).randbytes(3 * 1024 * 1024)

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            if framing == "close-delimited":
                await peer.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + payload)
                return
            await peer.send(ok(payload))

    async def main() -> None:
        async with (
            Server(handler, server_context(ca, "127.0.0.1")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            rounds = 2 if framing == "content-length" else 1
            for _ in range(rounds):
                response = await fetch(transport, get(server.url))
                connection = body_connection(response)
                await until(lambda c=connection: c._reading_paused, "reading paused", timeout=2.0)
                received = []
                async with asyncio.timeout(5):
                    async for piece in response.aiter_raw():
                        received.append(piece)
                        await asyncio.sleep(0.001)
                assert b"".join(received) == payload
                assert not connection._reading_paused
            assert len(server.peers) == 1

    run(main())


def test_tls_connection_the_server_closes_while_idle_leaves_the_pool(run, ca) -> None:
    # Over TLS the close arrives as close_notify through the SSL protocol, not as a plain EOF.
    # If it never reached connection_lost, the pool would hand out a dead connection and the
    # next request would cost a retry.
    async def handler(peer: Peer) -> None:
        if await peer.read_request() is not None:
            await peer.send(ok())
            await asyncio.sleep(0.1)  # then closes, like a server's keep-alive timeout

    async def main() -> None:
        async with (
            Server(handler, server_context(ca, "127.0.0.1")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert idle_count(transport) == 1
            started = time.monotonic()
            await until(lambda: idle_count(transport) == 0, "the closed one gone", timeout=2.0)
            assert time.monotonic() - started < 1.0
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_an_error_status_body_relayed_to_the_client_returns_its_connection_to_the_pool() -> None:
    # A 4xx with a body goes to the client through relay(); read to its end, the connection is
    # whole and is reused. If relay left it half-read (or closed it), every error would cost a
    # new upstream connection; if it pooled it half-read, the next answer would be garbage.
    replies = [
        b"HTTP/1.1 429 Too Many\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n"
        b'{"error":"x"}',
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + http_chunk(EVENT)
        + http_chunk(b"data: [DONE]\n\n")
        + LAST_CHUNK,
    ]

    async def handler(peer: Peer) -> None:
        for reply in replies:
            if await peer.read_request() is None:
                return
            await peer.send(reply)
        await peer.wait_closed()

    async def upstream_main(ready: threading.Event, stop: threading.Event, box: list) -> None:
        async with Server(handler) as server:
            box.append(server)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.01)

    ready, stop, box = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=asyncio.run, args=(upstream_main(ready, stop, box),))
    thread.start()
    try:
        assert ready.wait(5)
        server = box[0]
        with serving_in_thread(create_app(settings_for(server.url))) as proxy:
            url = f"{proxy.url}/v1/chat/completions"
            body = {"model": "m", "stream": True, "messages": []}
            failed = httpx.post(url, json=body, timeout=5)
            after = httpx.post(url, json=body, timeout=5)
    finally:
        stop.set()
        thread.join(5)
    assert failed.status_code == 429
    assert failed.content == b'{"error":"x"}'
    assert after.status_code == 200
    assert after.content.endswith(b"data: [DONE]\n\n")
    assert len(server.peers) == 1
