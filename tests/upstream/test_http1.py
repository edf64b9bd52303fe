"""The upstream HTTP/1.1 client (proxy/upstream/http1.py, proxy/upstream/http1_connection.py)
driven directly against small scripted asyncio servers (tests/support/scripted_servers.py),
under both the default event loop and uvloop: bodies of every framing, and the keep-alive pool.

The tests are plain functions that hand a coroutine to the `run` fixture rather than pytest-asyncio
tests: `run` is parametrized over the two loops (the proxy runs under uvloop in production, and
uvloop's transports are not asyncio.Transport subclasses), and it fails a test whose loop reported
an error (an exception escaping a protocol callback, a task's exception nobody retrieved).
"""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import httpx
import pytest
import uvloop

from proxy.upstream.http1 import Http1Transport
from tests.support.loops import LOOPS, client_context, server_context  # noqa: F401
from tests.support.scripted_servers import (
    WAIT,
    Peer,
    Server,
    answer,
    fetch,
    fetch_all,
    get,
    idle_count,
    ok,
    pieces,
)
from tests.support.waiting import until

# ── the loops ────────────────────────────────────────────────────────────────


def test_run_uses_the_named_loop(run, request) -> None:
    async def main() -> type:
        return type(asyncio.get_running_loop())

    loop_type = run(main())
    assert (loop_type is uvloop.Loop) == (request.node.callspec.params["run"] == "uvloop")


# ── bodies ───────────────────────────────────────────────────────────────────


def test_content_length_body(run) -> None:
    async def main() -> None:
        async with (
            Server(answer(ok(b"hello", b"X-Upstream: yes"))) as server,
            Http1Transport() as transport,
        ):
            response = await fetch(transport, get(server.url + "/v1/models"))
            assert response.status_code == 200
            assert response.headers.raw == [(b"Content-Length", b"5"), (b"X-Upstream", b"yes")]
            assert response.extensions["http_version"] == b"HTTP/1.1"
            assert b"".join(await pieces(response)) == b"hello"

    run(main())


def test_chunked_body_gives_one_piece_per_chunk(run) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        await peer.send(head + b"1\r\na\r\n2\r\nbc\r\n")  # two chunks in one write
        await asyncio.sleep(0.05)
        await peer.send(b"3;ext=1\r\ndef\r\n", b"0\r\n\r\n")
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            assert await pieces(response) == [b"a", b"bc", b"def"]

    run(main())


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.0 200 OK\r\n\r\n",
    ],
)
def test_close_delimited_body_ends_at_eof_and_is_not_reused(run, head: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(head + b"part one,")
        await asyncio.sleep(0.05)
        await peer.send(b" part two")
        # returning closes the connection: the body's end

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            assert await pieces(response) == [b"part one,", b" part two"]
            assert idle_count(transport) == 0
            response = await fetch(transport, get(server.url))
            assert b"".join(await pieces(response)) == b"part one, part two"
            assert len(server.peers) == 2

    run(main())


def test_head_response_completes_at_the_head_and_is_not_reused(run) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"  # a length, and no body after it

    async def main() -> None:
        async with Server(answer(head)) as server, Http1Transport() as transport:
            for _ in range(2):
                response = await fetch(transport, get(server.url, "HEAD"))
                assert response.headers["content-length"] == "5"
                assert await pieces(response) == []
            assert len(server.peers) == 2
            assert server.peers[0].requests == [
                b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % server.port
            ]

    run(main())


def test_gzip_body_is_decoded_by_aread_and_raw_iteration_gives_the_compressed_bytes(run) -> None:
    payload = b"streamfix repairs tool-call streams. " * 200
    compressed = gzip.compress(payload)

    async def main() -> None:
        response_bytes = ok(compressed, b"Content-Encoding: gzip")
        async with Server(answer(response_bytes)) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            async with asyncio.timeout(WAIT):
                assert await response.aread() == payload
            response = await fetch(transport, get(server.url))
            assert b"".join(await pieces(response)) == compressed
            assert len(server.peers) == 1

    run(main())


# ── the keep-alive pool ──────────────────────────────────────────────────────


def test_keep_alive_reuses_one_connection_and_sends_exactly_the_request(run) -> None:
    async def main() -> None:
        async with Server(answer(ok(b"first"))) as server, Http1Transport() as transport:
            url = server.url + "/v1/chat/completions?stream=1"
            for _ in range(2):
                request = get(url, "POST", content=b'{"a":1}', headers=[("Authorization", "k")])
                assert await fetch_all(transport, request) == (200, b"first")
            assert len(server.peers) == 1
            expected = (
                b"POST /v1/chat/completions?stream=1 HTTP/1.1\r\n"
                b"Host: 127.0.0.1:%d\r\n"
                b"Authorization: k\r\n"
                b"Content-Length: 7\r\n"
                b"\r\n"
                b'{"a":1}'
            ) % server.port
            assert server.peers[0].requests == [expected, expected]
            assert bytes(server.peers[0].received) == expected * 2

    run(main())


@pytest.mark.parametrize(
    ("response", "reused"),
    [
        (ok(b"ok", b"Connection: close"), False),
        (ok(b"ok", status=b"HTTP/1.0 200 OK"), False),
        (ok(b"ok", b"Connection: keep-alive", status=b"HTTP/1.0 200 OK"), True),
    ],
    ids=["connection-close", "http-1.0", "http-1.0-keep-alive"],
)
def test_a_response_that_ends_the_connection_is_not_reused(run, response, reused) -> None:
    async def main() -> None:
        # The server keeps its end open: the client decides from the response alone.
        async with Server(answer(response)) as server, Http1Transport() as transport:
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == (1 if reused else 2)
            if not reused:
                async with asyncio.timeout(WAIT):
                    await server.peers[0].closed.wait()  # closed by the client

    run(main())


def test_idle_connection_expires(run) -> None:
    async def main() -> None:
        async with (
            Server(answer(ok())) as server,
            Http1Transport(keepalive_expiry=0.2) as transport,
        ):
            loop = asyncio.get_running_loop()
            before = loop.time()
            await fetch_all(transport, get(server.url))
            assert idle_count(transport) == 1
            # The expiry is the loop's timer: observed, not raced with a sleep.
            [[connection]] = transport._idle.values()
            expiry = connection._expiry
            assert expiry is not None
            assert before + 0.2 - 0.002 <= expiry.when() <= loop.time() + 0.2 + 0.002
            assert not server.peers[0].closed.is_set()
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()
            assert loop.time() >= expiry.when()  # not before its time
            assert idle_count(transport) == 0
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_a_connection_the_server_closes_while_idle_leaves_the_pool(run) -> None:
    async def handler(peer: Peer) -> None:
        if await peer.read_request() is not None:
            await peer.send(ok())
            await asyncio.sleep(0.1)  # then closes, like a server's own keep-alive timeout

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert idle_count(transport) == 1
            await until(lambda: idle_count(transport) == 0, "the closed one gone", timeout=1.0)
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_bytes_arriving_on_an_idle_connection_close_it(run) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok())
        await asyncio.sleep(0.05)
        await peer.send(ok(b"unasked"))
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()
            assert idle_count(transport) == 0
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_extra_bytes_after_a_response_make_its_connection_unreusable(run) -> None:
    async def main() -> None:
        async with Server(answer(ok() + ok(b"extra"))) as server, Http1Transport() as transport:
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_idle_connections_beyond_the_limit_are_closed_oldest_first(run) -> None:
    test: dict[str, Any] = {}

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
            if peer.index == 0:  # once both are open, this one finishes first
                await until(lambda: len(test["server"].peers) == 2, "a second connection")
            else:  # and this one once the first is idle
                await until(lambda: idle_count(test["transport"]) == 1, "the first one idle")
            await peer.send(b"ok")

    async def main() -> None:
        async with Server(handler) as server, Http1Transport(max_idle_per_origin=1) as transport:
            test.update(server=server, transport=transport)
            # Two at once open two connections; the first to finish idles longest.
            results = await asyncio.gather(
                fetch_all(transport, get(server.url)), fetch_all(transport, get(server.url))
            )
            assert results == [(200, b"ok"), (200, b"ok")]
            assert len(server.peers) == 2
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()
            assert not server.peers[1].closed.is_set()
            assert idle_count(transport) == 1

    run(main())


def test_abandoning_a_body_closes_its_connection(run) -> None:
    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.read_request()
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000)
            await peer.wait_closed()
        else:
            await answer(ok())(peer)

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            body = response.stream.__aiter__()
            async with asyncio.timeout(WAIT):
                assert await anext(body) == b"x" * 1000
            await response.aclose()
            await body.aclose()  # type: ignore[attr-defined]
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()
            assert idle_count(transport) == 0
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_closing_the_transport_closes_idle_connections(run) -> None:
    async def main() -> None:
        async with Server(answer(ok())) as server:
            transport = Http1Transport()
            await fetch_all(transport, get(server.url))
            assert idle_count(transport) == 1
            await transport.aclose()
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()
            with pytest.raises(httpx.ConnectError, match="closed"):
                await fetch(transport, get(server.url))
            assert len(server.peers) == 1

    run(main())
