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

from proxy.upstream.happy_eyeballs import open_connection
from proxy.upstream.http1_connection import (
    MAX_FIELDS,
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    Connection,
    Failure,
    Limits,
    TooLarge,
    Unanswered,
    WriteCut,
)

Origin = tuple[str, str, int]

# Idle connections are dropped before the common server keep-alive timeouts (uvicorn and Node
# close idle connections after 5 s): reusing one the server is closing is a lost request.
KEEPALIVE_EXPIRY = 4.0
MAX_IDLE_PER_ORIGIN = 64
DEFAULT_PORTS = {"http": 80, "https": 443}

# RFC 9110 §9.2.2: what the upstream may receive twice with the same effect as once.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
IDEMPOTENCY_KEYS = ("idempotency-key", "x-idempotency-key")
RETRIED = "streamfix.retried"
"""The response extension that says why the request went upstream twice (absent: once)."""


class ResponseTooLarge(httpx.RemoteProtocolError):
    """The upstream's response head, a chunk-size line or the trailers went past a limit."""

    code = "upstream_response_too_large"


class ClosedWithoutResponse(httpx.RemoteProtocolError):
    """The upstream closed the connection after the request went out, without a byte back."""

    code = "upstream_no_response"


class NotRetried(ClosedWithoutResponse):
    """As ClosedWithoutResponse, on a reused connection, for a request that is not sent twice:
    it may have reached the upstream, and it is neither idempotent nor keyed."""


class Http1Transport(httpx.AsyncBaseTransport):
    """A keep-alive pool per origin: the most recently used idle connection first, each idle one
    closed by its own timer once it has been idle `keepalive_expiry` seconds, or at once when the
    server closes it. No cap on open connections: HTTP/1.1 needs one per request in flight, and the
    client side is capped by `server.max_connections`.

    A request goes upstream twice only when the first time provably did no harm (the rule of Go's
    net/http): on a reused connection that ended before a byte of response came back, and only
    for an idempotent or keyed request. Never on a fresh connection, after a response byte, after
    a timeout, or when the connection ended while the request was still being written."""

    def __init__(
        self,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
        ssl_context: ssl.SSLContext | None = None,
        max_head_bytes: int = MAX_HEAD_BYTES,
        max_fields: int = MAX_FIELDS,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self._expiry = keepalive_expiry
        self._max_idle = max_idle_per_origin
        self._limits = Limits(max_head_bytes, max_fields, max_line_bytes)
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
        # Before taking a connection: a refused header must not cost a pooled one, nor a connect;
        # and nothing awaits between the pool's liveness check and the write.
        data = _head(request) + await request.aread()
        connection = self._reuse(origin)
        if connection is None:
            connection = await self._fresh(origin, timeouts, request)
            return await self._exchange(connection, data, request, timeouts)
        try:
            return await self._exchange(connection, data, request, timeouts)
        except ClosedWithoutResponse as exc:
            why = _replayable(request)
            if why is None:
                raise NotRetried(_not_retried(request, exc), request=request) from exc
            retried = (
                f"the upstream closed a reused connection without a byte of response ({exc}); "
                f"sent once more on a new connection: {why}"
            )
        connection = await self._fresh(origin, timeouts, request)
        response = await self._exchange(connection, data, request, timeouts)
        response.extensions[RETRIED] = retried
        return response

    async def _exchange(
        self,
        connection: Connection,
        data: bytes,
        request: httpx.Request,
        timeouts: dict[str, Any],
    ) -> httpx.Response:
        """One request on one connection, up to the response head."""
        phase = "write"
        try:
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
            stream=ResponseBody(self, connection.origin, connection, timeouts.get("read"), request),
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
            if connection.reusable and connection.alive():
                return connection
            connection.close()  # nothing was sent on it: the next one, or a new one
        return None

    async def _fresh(
        self, origin: Origin, timeouts: dict[str, Any], request: httpx.Request
    ) -> Connection:
        connection = await self._connect(origin, timeouts, request)
        connection.limits = self._limits
        return connection

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
    """Request line and headers. httpx has already set Host and Content-Length. No field may
    hold a line break (it would end the head early): counted over all the fields at once, each
    ending in exactly one, and only a head that fails the count is searched for the culprit."""
    fields = [b"%s: %s\r\n" % pair for pair in request.headers.raw]
    block = b"".join(fields)
    if block.count(b"\n") != len(fields) or block.count(b"\r") != len(fields):
        _refuse_line_break(request)
    line = b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)
    return line + block + b"\r\n"


def _refuse_line_break(request: httpx.Request) -> NoReturn:
    for name, value in request.headers.raw:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
            raise httpx.LocalProtocolError(f"header {name!r} holds a line break", request=request)
    raise AssertionError("a line break was counted but not found")  # pragma: no cover


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
        timeout = {"connect": httpx.ConnectTimeout, "write": httpx.WriteTimeout}
        return timeout.get(phase, httpx.ReadTimeout)(f"{phase} timed out", request=request)
    if isinstance(exc, Failure):
        return _FAILURES.get(type(exc), httpx.RemoteProtocolError)(str(exc), request=request)
    if isinstance(exc, httptools.HttpParserError):
        return httpx.RemoteProtocolError(f"malformed response: {exc}", request=request)
    kind = {"connect": httpx.ConnectError, "write": httpx.WriteError}.get(phase, httpx.ReadError)
    return kind(f"{type(exc).__name__}: {exc}", request=request)


# Only an unanswered request is ever sent again (by handle_async_request); a cut write is a
# WriteError, which nothing retries.
_FAILURES: dict[type[Failure], type[httpx.TransportError]] = {
    Unanswered: ClosedWithoutResponse,
    WriteCut: httpx.WriteError,
    TooLarge: ResponseTooLarge,
}


def _replayable(request: httpx.Request) -> str | None:
    """Why sending `request` twice does no harm, or None (Go's net/http: isReplayable)."""
    if request.method in IDEMPOTENT:
        return f"{request.method} is idempotent"
    for name in IDEMPOTENCY_KEYS:
        if name in request.headers:
            return f"it carries {name}"
    return None


def _not_retried(request: httpx.Request, exc: Exception) -> str:
    return (
        f"{exc} The upstream closed a reused connection without answering; the {request.method} "
        "was not sent again because it may have reached the upstream (it is not idempotent and "
        "carries no Idempotency-Key)"
    )
