"""Loopback servers for the egress and Happy Eyeballs tests: an upstream that answers every
request with its path, a forward proxy (CONNECT and absolute-form) that notes what it served,
and what the `run` fixtures give: a test's coroutine run under asyncio and under uvloop."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.loops import LOOPS, client_context, loop_runner, server_context  # noqa: F401

WAIT = 3.0  # any single await that should complete
TIMEOUTS = {"connect": 3.0, "read": 3.0, "write": 3.0, "pool": 3.0}


def get(url: str, **headers: str) -> httpx.Request:
    return httpx.Request("GET", url, headers=headers, extensions={"timeout": TIMEOUTS})


async def fetch(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> tuple[int, bytes]:
    response = await transport.handle_async_request(request)
    try:
        return response.status_code, await response.aread()
    finally:
        await response.aclose()


class Tasks:
    """The connection handlers a server started, cancelled and awaited when it stops."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def add_current(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        async with asyncio.timeout(WAIT):
            await asyncio.gather(*self._tasks, return_exceptions=True)


class Upstream:
    """HTTP/1.1 on 127.0.0.1 (TLS with `ssl_context`): each request, on keep-alive connections,
    answered 200 with its request line as the body."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context
        self.requests: list[bytes] = []
        self.connections = 0
        self._tasks = Tasks()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"{'https' if self._ssl else 'http'}://{host}:{self.port}"

    async def __aenter__(self) -> Upstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        await self._tasks.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add_current()
        self.connections += 1
        try:
            for _ in range(100):  # bounded: a test sends a handful
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                line = head.split(b"\r\n", 1)[0]
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(line), line))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass  # the client closed the connection
        except asyncio.CancelledError:
            pass  # the test is over (a handler task ending cancelled makes 3.11's asyncio log)
        finally:
            writer.close()


class ForwardProxy:
    """An HTTP forward proxy on 127.0.0.1: CONNECT tunnels and absolute-form requests, always
    to 127.0.0.1 (whatever host was asked for), each request head kept. `refuse` answers every
    request 407 instead."""

    def __init__(self, refuse: bool = False) -> None:
        self.heads: list[bytes] = []
        self._refuse = refuse
        self._tasks = Tasks()

    @property
    def lines(self) -> list[bytes]:
        return [head.split(b"\r\n", 1)[0] for head in self.heads]

    @property
    def connects(self) -> int:
        return sum(line.startswith(b"CONNECT ") for line in self.lines)

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}"

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        await self._tasks.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add_current()
        try:
            async with asyncio.timeout(WAIT):
                head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            if self._refuse:
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n")
                writer.write(b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                return
            await self._relay(head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # the test is over, as in Upstream
        finally:
            writer.close()

    async def _relay(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        method, target, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
        if method == b"CONNECT":
            port = int(target.rsplit(b":", 1)[1])
            far_reader, far_writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:  # absolute form: the origin-form request goes on to the origin
            url = urlsplit(target.decode())
            far_reader, far_writer = await asyncio.open_connection("127.0.0.1", url.port)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            far_writer.write(head.replace(target, path.encode(), 1))
        try:
            await asyncio.gather(_pipe(reader, far_writer), _pipe(far_reader, writer))
        finally:
            far_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


# ── TLS ──────────────────────────────────────────────────────────────────────


# ── addresses that do not answer ─────────────────────────────────────────────


@contextmanager
def blackhole() -> Iterator[tuple[str, int]]:
    """A loopback address whose connects hang: a listener that never accepts, its accept queue
    filled (Linux then drops further SYNs, and the client retransmits for as long as it waits).
    Skips the test where the OS answers such a SYN at once instead."""
    listener = socket.socket()
    held: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        address = listener.getsockname()
        for _ in range(8):  # bounded: Linux drops the second connect of a backlog of 0
            client = socket.socket()
            held.append(client)
            client.settimeout(0.2)
            try:
                client.connect(address)
            except TimeoutError:
                break
            except OSError as exc:
                pytest.skip(f"a full accept queue refuses here ({exc}) instead of dropping")
        else:
            pytest.skip("could not fill the accept queue of a loopback listener")
        yield address
    finally:
        for client in held:
            client.close()
        listener.close()


def refused_port() -> int:
    """A loopback port nothing listens on (the kernel refuses connects to it at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
