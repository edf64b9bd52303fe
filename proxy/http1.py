"""The upstream HTTP/1.1 client: asyncio protocols and httptools' C parser behind httpx's transport
interface, so recording, replay and every handler above it stay as they are.

Why not httpx's own transport: on a loopback round trip httpcore (h11's pure-Python state machine,
anyio cancel scopes and locks per read) cost 0.44 ms against 0.12 ms for this client, the
largest single share of the latency the proxy added (bench/README.md, "upstream client").
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import httptools
import httpx

from proxy.happy_eyeballs import open_connection
from proxy.http1_connection import Connection, Failure

Origin = tuple[str, str, int]

# Idle connections are dropped before the common server keep-alive timeouts (uvicorn and Node
# close idle connections after 5 s): reusing one the server is closing is a lost request.
KEEPALIVE_EXPIRY = 4.0
MAX_IDLE_PER_ORIGIN = 64
DEFAULT_PORTS = {"http": 80, "https": 443}


class Http1Transport(httpx.AsyncBaseTransport):
    """A keep-alive pool per origin: the most recently used idle connection first, each idle one
    closed by its own timer once it has been idle `keepalive_expiry` seconds, or at once when the
    server closes it. No limit on open connections, as before with httpx's pool."""

    def __init__(
        self,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._expiry = keepalive_expiry
        self._max_idle = max_idle_per_origin
        self._idle: dict[Origin, list[Connection]] = {}
        # None: httpx's default context (certifi's roots), built on first https
        self._ssl: ssl.SSLContext | None = ssl_context
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise httpx.ConnectError("the upstream client is closed", request=request)
        url = request.url
        origin = (url.scheme, url.host, url.port or DEFAULT_PORTS.get(url.scheme, 80))
        timeouts = request.extensions.get("timeout", {})
        # Before taking a connection: a refused header must not cost a pooled one, nor a connect.
        head = _head(request)
        connection = self._reuse(origin) or await self._connect(origin, timeouts, request)
        phase = "write"
        try:
            data = head + await request.aread()
            await connection.send(data, timeouts.get("write"), request.method == "HEAD")
            phase = "read"
            await connection.response_head(timeouts.get("read"))
        except Exception as exc:
            connection.close()
            _raise_as_httpx(exc, request, phase)
        except BaseException:
            connection.close()
            raise
        return httpx.Response(
            connection.status,
            headers=connection.headers,
            stream=ResponseBody(self, origin, connection, timeouts.get("read"), request),
            extensions={"http_version": connection.http_version},
        )

    async def aclose(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    # ── the pool ─────────────────────────────────────────────────────────────

    def _reuse(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            connection.cancel_expiry()
            if connection.reusable:
                return connection
            connection.close()
        return None

    async def _connect(
        self, origin: Origin, timeouts: dict[str, Any], request: httpx.Request
    ) -> Connection:
        scheme, host, port = origin
        context = self._ssl_context() if scheme == "https" else None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                # Happy Eyeballs: a dead first address costs 250 ms, not the connect timeout
                _, connection = await open_connection(
                    loop, lambda: Connection(self._forget), host, port, ssl_context=context
                )
        except Exception as exc:
            _raise_as_httpx(exc, request, "connect")
        connection.origin = origin
        return connection

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        return self._ssl

    def release(self, origin: Origin, connection: Connection) -> None:
        """A finished response hands its connection back: kept when it can carry another."""
        if self._closed or not connection.reusable:
            connection.close()
            return
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            idle.pop(0).close()  # the one idle longest goes
        idle.append(connection)
        connection.expire_after(self._expiry)

    def _forget(self, connection: Connection) -> None:
        """A connection closed (by the server, or its expiry timer) leaves the idle list."""
        idle = self._idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)


class ResponseBody(httpx.AsyncByteStream):
    """The body as it arrives: everything buffered so far in one piece per read."""

    def __init__(
        self,
        pool: Http1Transport,
        origin: Origin,
        connection: Connection,
        read_timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._connection: Connection | None = connection
        self._timeout = read_timeout
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        while True:
            try:
                data = await connection.read_body(self._timeout)
            except Exception as exc:
                self._close()
                _raise_as_httpx(exc, self._request, "read")
            except BaseException:
                self._close()
                raise
            if not data:
                break
            yield data
        self._connection = None
        self._pool.release(self._origin, connection)

    async def aclose(self) -> None:
        self._close()

    def _close(self) -> None:
        """Closed before its end (the client left, or a read failed): the connection is in an
        unknown place of a response and cannot be reused."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _head(request: httpx.Request) -> bytes:
    """Request line and headers. httpx has already set Host and Content-Length."""
    lines = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
            raise httpx.LocalProtocolError(f"header {name!r} holds a line break", request=request)
        lines += (name, b": ", value, b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


def _raise_as_httpx(exc: Exception, request: httpx.Request, phase: str) -> NoReturn:
    converted = _as_httpx(exc, request, phase)
    if converted is exc:
        raise exc
    raise converted from exc


def _as_httpx(exc: Exception, request: httpx.Request, phase: str) -> Exception:
    """The httpx exception the rest of the proxy (and its retry rule) already understands."""
    if isinstance(exc, httpx.HTTPError):
        return exc
    if isinstance(exc, TimeoutError):
        kind = {"connect": httpx.ConnectTimeout, "write": httpx.WriteTimeout}
        return kind.get(phase, httpx.ReadTimeout)(f"{phase} timed out", request=request)
    if isinstance(exc, Failure):
        return httpx.RemoteProtocolError(str(exc), request=request)
    if isinstance(exc, httptools.HttpParserError):
        return httpx.RemoteProtocolError(f"malformed response: {exc}", request=request)
    # A failed write is not retried (the upstream may have read part of the request);
    # a failed read before any response byte is, by the app's rule for stale connections.
    kind = {"connect": httpx.ConnectError, "write": httpx.WriteError}.get(phase, httpx.ReadError)
    return kind(f"{type(exc).__name__}: {exc}", request=request)
