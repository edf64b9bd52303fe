"""The upstream HTTP/1.1 client (proxy/upstream/http1.py, proxy/upstream/http1_connection.py)
driven directly,
against small scripted asyncio servers, under both the default event loop and uvloop.

The tests are plain functions that hand a coroutine to the `run` fixture rather than pytest-asyncio
tests: `run` is parametrized over the two loops (the proxy runs under uvloop in production, and
uvloop's transports are not asyncio.Transport subclasses), and it fails a test whose loop reported
an error (an exception escaping a protocol callback, a task's exception nobody retrieved).
"""

from __future__ import annotations

import asyncio
import gzip
import random
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx
import pytest
import trustme
import uvloop

from proxy.upstream.http1 import Http1Transport
from proxy.upstream.http1_connection import CUT_SHORT, HIGH_WATER, NO_RESPONSE, Connection
from tests.support.loops import LOOPS, client_context, server_context  # noqa: F401
from tests.support.waiting import until

WAIT = 3.0  # any single await that should complete
TIMEOUTS = {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}
SOCKET_READ = 256 * 1024  # the most one read takes off a socket (asyncio's and uvloop's buffers)


# ── scripted servers ─────────────────────────────────────────────────────────


class Peer:
    """One connection the server accepted: what it received, and whether the client closed it."""

    def __init__(self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.index = index
        self.reader = reader
        self.writer = writer
        self.received = bytearray()
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()  # the server saw the client's end (EOF or reset)

    async def read_request(self) -> bytes | None:
        """One whole request, head and Content-Length body, as it came; None once the client
        closed the connection."""
        try:
            async with asyncio.timeout(WAIT):
                head = await self.reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError):
                self.received += exc.partial
            self.closed.set()
            return None
        self.received += head + body
        self.requests.append(head + body)
        return head + body

    async def wait_closed(self) -> None:
        """Reads (and records) whatever else comes until the client closes the connection."""
        try:
            async with asyncio.timeout(WAIT):
                self.received += await self.reader.read()
        except ConnectionError:
            pass
        self.closed.set()

    async def send(self, *parts: bytes) -> None:
        for part in parts:
            self.writer.write(part)
            async with asyncio.timeout(WAIT):
                await self.writer.drain()


Handler = Callable[[Peer], Awaitable[None]]


class Server:
    """A raw HTTP server on 127.0.0.1: `handler` scripts each connection; the server closes the
    connection when the handler returns."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self.peers: list[Peer] = []
        self.errors: list[BaseException] = []
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        async with asyncio.timeout(WAIT):
            await asyncio.gather(*self._tasks)
        if exc_info[0] is None:  # a failing test's own error says more
            assert self.errors == []

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(len(self.peers), reader, writer)
        self.peers.append(peer)
        self._tasks.append(cast(asyncio.Task[None], asyncio.current_task()))
        try:
            await self._handler(peer)
        except ConnectionError:
            pass  # the client went away while the script was writing
        except asyncio.CancelledError:
            pass  # the test is over (a handler task ending cancelled makes 3.11's asyncio log)
        except Exception as exc:
            self.errors.append(exc)
        finally:
            writer.close()


def answer(*responses: bytes) -> Handler:
    """Answers every request on a connection with `responses`, until the client closes it."""

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await peer.send(*responses)

    return handler


def ok(body: bytes = b"ok", *headers: bytes, status: bytes = b"HTTP/1.1 200 OK") -> bytes:
    lines = [status, b"Content-Length: %d" % len(body), *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def get(url: str, method: str = "GET", **kwargs: Any) -> httpx.Request:
    timeout = {**TIMEOUTS, **kwargs.pop("timeout", {})}
    return httpx.Request(method, url, extensions={"timeout": timeout}, **kwargs)


async def fetch(transport: Http1Transport, request: httpx.Request) -> httpx.Response:
    async with asyncio.timeout(WAIT):
        return await transport.handle_async_request(request)


async def pieces(response: httpx.Response) -> list[bytes]:
    """The body as the transport delivered it, piece by piece."""
    async with asyncio.timeout(WAIT):
        return [piece async for piece in response.aiter_raw()]


async def fetch_all(transport: Http1Transport, request: httpx.Request) -> tuple[int, bytes]:
    response = await fetch(transport, request)
    return response.status_code, b"".join(await pieces(response))


async def pieces_until_error(response: httpx.Response) -> tuple[list[bytes], Exception | None]:
    received: list[bytes] = []
    try:
        async with asyncio.timeout(WAIT):
            async for piece in response.aiter_raw():
                received.append(piece)
    except httpx.HTTPError as exc:
        return received, exc
    return received, None


def body_connection(response: httpx.Response) -> Connection:
    connection = response.stream._connection  # type: ignore[attr-defined]
    assert isinstance(connection, Connection)
    return connection


def idle_count(transport: Http1Transport) -> int:
    return sum(len(connections) for connections in transport._idle.values())


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


# ── TLS ──────────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_tls_request_succeeds_and_its_connection_is_reused(run, ca) -> None:
    async def main() -> None:
        async with (
            Server(answer(ok(b"secret")), server_context(ca, "127.0.0.1")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            for _ in range(2):
                assert await fetch_all(transport, get(server.url + "/v1")) == (200, b"secret")
            assert len(server.peers) == 1
            assert server.peers[0].requests[1].startswith(b"GET /v1 HTTP/1.1\r\n")

    run(main())


def test_tls_close_delimited_body_ends_at_the_close(run, ca) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")

    async def main() -> None:
        async with (
            Server(handler, server_context(ca, "127.0.0.1")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            assert await fetch_all(transport, get(server.url)) == (200, b"all of it")

    run(main())


def test_tls_certificate_for_another_host_is_connect_error(run, ca) -> None:
    async def main() -> None:
        async with (
            Server(answer(ok()), server_context(ca, "upstream.example")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await fetch(transport, get(server.url))
            assert all(peer.requests == [] for peer in server.peers)

    run(main())


def test_tls_without_the_test_ca_is_connect_error(run, ca) -> None:
    """The default context (httpx's, certifi's roots) does not trust the throwaway CA."""

    async def main() -> None:
        async with (
            Server(answer(ok()), server_context(ca, "127.0.0.1")) as server,
            Http1Transport() as transport,
        ):
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await fetch(transport, get(server.url))

    run(main())
