"""Small scripted asyncio servers on 127.0.0.1 for driving the upstream HTTP/1.1 client
(proxy/upstream/http1.py) directly: a `Server` runs a handler per connection, a `Peer` is one
accepted connection; and helpers that send a request and read its response."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx

from proxy.upstream.http1 import Http1Transport
from proxy.upstream.http1_connection import Connection
from tests.support.loops import LOOPS, client_context, server_context  # noqa: F401
from tests.support.raw_upstream import content_length

WAIT = 3.0  # any single await that should complete
TIMEOUTS = {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}
SOCKET_READ = 256 * 1024  # the most one read takes off a socket (asyncio's and uvloop's buffers)


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
                body = await self.reader.readexactly(content_length(head))
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
