"""The upstream HTTP/1.1 client driven directly, when things go wrong: servers that close, stall,
refuse or answer malformed heads and chunks give the httpx error a caller expects, at the point
it expects it; and a slow reader pauses the socket and still gets every byte.

Every test runs once per event loop (the `run` fixture, tests/support/loops.py) against small
scripted asyncio servers (tests/support/scripted_servers.py).
"""

from __future__ import annotations

import asyncio
import random
import socket

import httpx
import pytest

from proxy.upstream.http1 import Http1Transport
from proxy.upstream.http1_connection import CUT_SHORT, HIGH_WATER, NO_RESPONSE
from tests.support.loops import LOOPS, client_context, server_context  # noqa: F401
from tests.support.scripted_servers import (
    SOCKET_READ,
    WAIT,
    Peer,
    Server,
    answer,
    body_connection,
    fetch,
    fetch_all,
    get,
    idle_count,
    ok,
    pieces,
    pieces_until_error,
)
from tests.support.waiting import until

# ── failures ─────────────────────────────────────────────────────────────────


def test_a_server_closing_without_answering_is_no_response(run) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()  # and closes

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            with pytest.raises(httpx.RemoteProtocolError) as caught:
                await fetch(transport, get(server.url, "POST", content=b"{}"))
            assert str(caught.value) == "Server disconnected without sending a response."
            assert len(server.peers) == 1
            assert len(server.peers[0].requests) == 1

    run(main())


def test_a_kept_connection_the_server_drops_at_the_next_request_is_no_response(run) -> None:
    """The server took the connection's second request, a POST, and closed it unanswered: it
    may have reached the upstream, so it is not sent again (tests/upstream/test_http1_retries.py has
    the idempotent requests that are)."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok())
        await peer.read_request()  # and closes

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            await fetch_all(transport, get(server.url))
            with pytest.raises(httpx.RemoteProtocolError) as caught:
                await fetch(transport, get(server.url, "POST", content=b"{}"))
            assert str(caught.value).startswith(NO_RESPONSE)
            assert "not sent again" in str(caught.value)
            assert len(server.peers) == 1
            assert idle_count(transport) == 0

    run(main())


def test_a_server_closing_mid_chunked_body_fails_the_iteration(run) -> None:
    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.read_request()
            await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            await asyncio.sleep(0.05)
            await peer.send(b"5\r\nde")  # and closes inside the chunk
        else:
            await answer(ok())(peer)

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            received, error = await pieces_until_error(response)
            assert received == [b"abc", b"de"]
            assert type(error) is httpx.RemoteProtocolError
            assert str(error) == CUT_SHORT
            assert idle_count(transport) == 0
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_a_server_closing_mid_content_length_body_fails_the_iteration(run) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            received, error = await pieces_until_error(response)
            assert received == [b"12345"]
            assert type(error) is httpx.RemoteProtocolError

    run(main())


def test_connection_refused_is_connect_error(run) -> None:
    async def main() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        async with Http1Transport() as transport:
            with pytest.raises(httpx.ConnectError):
                await fetch(transport, get(f"http://127.0.0.1:{port}/"))

    run(main())


def test_no_head_within_the_read_timeout_is_read_timeout(run) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.wait_closed()  # never answers

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            with pytest.raises(httpx.ReadTimeout):
                await fetch(transport, get(server.url, timeout={"read": 0.2}))
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()
            assert idle_count(transport) == 0

    run(main())


def test_a_stall_between_body_pieces_is_read_timeout_from_the_iteration(run) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await peer.wait_closed()  # the rest never comes

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url, timeout={"read": 0.2}))
            received, error = await pieces_until_error(response)
            assert received == [b"abc"]
            assert type(error) is httpx.ReadTimeout
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()
            assert idle_count(transport) == 0

    run(main())


def test_a_server_that_does_not_read_is_write_timeout(run) -> None:
    async def handler(peer: Peer) -> None:
        await asyncio.sleep(WAIT)  # reads nothing

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            big = b"x" * (32 * 1024 * 1024)
            request = get(server.url, "POST", content=big, timeout={"write": 0.2})
            with pytest.raises(httpx.WriteTimeout):
                await fetch(transport, request)

    run(main())


@pytest.mark.parametrize(
    "response",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n",
    ],
    ids=["status-line", "status-code", "content-length"],
)
def test_a_malformed_head_is_remote_protocol_error(run, response: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response)
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            with pytest.raises(httpx.RemoteProtocolError, match=r"^malformed response"):
                await fetch(transport, get(server.url))
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()

    run(main())


def test_a_malformed_chunk_is_remote_protocol_error_from_the_iteration(run) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await asyncio.sleep(0.05)
        await peer.send(b"zz\r\nnot a chunk\r\n")
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            received, error = await pieces_until_error(response)
            assert received == [b"abc"]
            assert type(error) is httpx.RemoteProtocolError
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()

    run(main())


def test_informational_responses_before_the_head_are_skipped(run) -> None:
    informational = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    )

    async def main() -> None:
        async with (
            Server(answer(informational, ok(b"real"))) as server,
            Http1Transport() as transport,
        ):
            for _ in range(2):
                response = await fetch(transport, get(server.url))
                assert response.status_code == 200
                assert response.headers.raw == [(b"Content-Length", b"4")]
                assert b"".join(await pieces(response)) == b"real"
            assert len(server.peers) == 1

    run(main())


@pytest.mark.parametrize(
    "upgrade", [b"Upgrade: websocket\r\nConnection: upgrade\r\n", b""], ids=["upgrade", "bare"]
)
def test_switching_protocols_is_remote_protocol_error(run, upgrade: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 101 Switching Protocols\r\n" + upgrade + b"\r\nframes")
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            with pytest.raises(httpx.RemoteProtocolError, match="switched protocols"):
                await fetch(transport, get(server.url))
            async with asyncio.timeout(WAIT):
                await server.peers[0].closed.wait()

    run(main())


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(run) -> None:
    async def main() -> None:
        async with Server(answer(ok())) as server, Http1Transport() as transport:
            bad = get(server.url, headers={"x-note": "a\r\nInjected: 1"})
            with pytest.raises(httpx.LocalProtocolError):
                await fetch(transport, bad)
            assert server.peers == []  # not even a connection
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            with pytest.raises(httpx.LocalProtocolError):
                await fetch(transport, get(server.url, headers={"x-note": "a\nb"}))
            with pytest.raises(httpx.LocalProtocolError, match="'x-note' holds a line break"):
                await fetch(transport, get(server.url, headers={"x-note": "a\rb"}))
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            # The idle connection survived the refused request, and got nothing of it.
            assert len(server.peers) == 1
            assert bytes(server.peers[0].received) == b"".join(server.peers[0].requests)
            assert len(server.peers[0].requests) == 2

    run(main())


# ── backpressure ─────────────────────────────────────────────────────────────


def test_a_slow_reader_pauses_the_socket_and_still_gets_every_byte(run) -> None:
    payload = random.Random(7).randbytes(4 * 1024 * 1024)

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await peer.send(ok(payload))

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            connection = body_connection(response)
            await until(lambda: connection._reading_paused, "reading paused", timeout=2.0)
            await asyncio.sleep(0.2)  # anything still arriving would land now
            assert connection._transport is not None
            assert connection._transport.is_reading() is False
            assert HIGH_WATER <= connection._buffered < HIGH_WATER + SOCKET_READ
            assert b"".join(await pieces(response)) == payload
            # Reading resumed and the connection is whole: the next request reuses it.
            response = await fetch(transport, get(server.url))
            assert b"".join(await pieces(response)) == payload
            assert len(server.peers) == 1

    run(main())
