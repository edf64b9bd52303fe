"""Sending the battery: each request once to the upstream as a client would send it, then the
same request through the real app in process (`create_app` over an ASGI transport, as
`streamfix replay` and `explain` run it), whose transport answers with the upstream's recorded
bytes when the proxy forwards the request unchanged and sends it upstream only when a repair
changed it. Requests go to the given upstream only, each with a timeout, all within a budget
of requests and a total time limit; the key goes only into their Authorization header (the
in-process app never holds it: its transport adds it to what it sends upstream).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from proxy.upstream.body_decoding import decoder_for
from proxy.upstream.cassettes import Cassette, Chunk, request_key
from proxy.upstream.failures import describe_failure
from proxy.upstream.recording import relative_path
from proxy.wire.limits import LimitExceeded

DOCTOR_TENANT = "streamfix-doctor"
"""The credential the in-process client presents, so receipts are kept between its turns;
never sent upstream (the transport puts the upstream's key in its place, or none)."""


class OutOfTime(Exception):
    """The run's total time limit or request budget is spent."""


class Unreachable(Exception):
    """No connection to the upstream at all; the message is the proxy's own line for it
    (`upstream 127.0.0.1:19599 refused the connection`)."""


@dataclass
class Limits:
    timeout: float
    """Seconds for one request, connect to last byte."""
    total: float
    """Seconds for the whole run."""
    requests: int
    """Requests the run may send upstream, direct and by the proxy together."""

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.total
        self.sent = 0

    def take(self) -> float:
        """One more request: the seconds it may take, or OutOfTime."""
        left = self.deadline - time.monotonic()
        if self.sent >= self.requests or left <= 0:
            raise OutOfTime("the run's request budget or time limit is spent")
        self.sent += 1
        return min(self.timeout, left)


async def send(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: bytes,
    limits: Limits,
    stop_unreachable: bool = False,
) -> Cassette:
    """One request upstream, its answer as a cassette (status 0: none came, the reason as the
    body; the exception's text names no header, so never the key). `stop_unreachable`: a
    connection that cannot be made raises `Unreachable` instead, since every other request of
    the run would fail the same way."""
    cassette = Cassette("POST", "chat/completions", "", {"content-type": "application/json"}, body)
    try:
        seconds = limits.take()
        async with asyncio.timeout(seconds):
            request = client.build_request("POST", url, headers=headers, content=body)
            response = await client.send(request, stream=True)
            try:
                started = time.monotonic()
                async for piece in response.aiter_raw():
                    cassette.chunks.append(Chunk(time.monotonic() - started, piece))
            finally:
                await response.aclose()
        cassette.status = response.status_code
        cassette.response_headers = {
            name: value
            for name, value in response.headers.items()
            if name in ("content-type", "content-encoding")
        }
    except httpx.ConnectError as exc:
        if stop_unreachable:
            raise Unreachable(describe_failure(exc)[1]) from None
        cassette.status, cassette.chunks = 0, [Chunk(0.0, type(exc).__name__.encode())]
    except (httpx.HTTPError, TimeoutError, OutOfTime) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
        text = str(exc) if isinstance(exc, OutOfTime) else reason
        cassette.status, cassette.chunks = 0, [Chunk(0.0, text.encode())]
    return cassette


def upstream_body(cassette: Cassette) -> bytes:
    """The bytes as they came (compressed, when the upstream compressed them)."""
    return b"".join(chunk.data for chunk in cassette.chunks)


def upstream_text(cassette: Cassette) -> bytes:
    """The body to examine: decoded as the proxy decodes it (gzip, deflate), else as it came."""
    decoder = decoder_for(cassette.response_headers.get("content-encoding", ""))
    if decoder is None:
        return upstream_body(cassette)
    try:
        pieces = [b"".join(decoder.decode(chunk.data)) for chunk in cassette.chunks]
        return b"".join(pieces) + decoder.flush()
    except LimitExceeded:
        return upstream_body(cassette)


class AnsweringTransport(httpx.AsyncBaseTransport):
    """The in-process proxy's upstream: a request the proxy forwards exactly as the client sent
    it gets the upstream's recorded answer (nothing sent twice); one a repair changed goes to
    the upstream, within the run's limits, and only to its base URL."""

    def __init__(self, base_url: str, limits: Limits, authorization: str = "") -> None:
        self._base_url = base_url.rstrip("/")
        self._authorization = authorization
        self._limits = limits
        self._recorded: dict[str, Cassette] = {}
        self._live = httpx.AsyncClient(timeout=limits.timeout)
        self.sent_by_proxy = 0

    def add(self, cassette: Cassette) -> None:
        key = request_key(cassette.method, cassette.path, cassette.request_body, exact=True)
        self._recorded[key] = cassette

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        path = relative_path(request, self._base_url)
        recorded = self._recorded.get(request_key(request.method, path, body, exact=True))
        if recorded is None:
            if not str(request.url).startswith(self._base_url + "/"):
                return httpx.Response(502, json={"error": {"message": "not the upstream"}})
            # The upstream's key, never the in-process client's made-up tenant credential.
            headers = {"content-type": "application/json"}
            if self._authorization:
                headers["authorization"] = self._authorization
            self.sent_by_proxy += 1
            recorded = await send(self._live, str(request.url), headers, body, self._limits)
            if recorded.status == 0:
                message = upstream_body(recorded).decode()
                return httpx.Response(502, json={"error": {"message": message}})
        return httpx.Response(
            recorded.status,
            headers=recorded.response_headers,
            stream=httpx.ByteStream(upstream_body(recorded)),  # raw, as a live stream is read
        )

    async def aclose(self) -> None:
        """Nothing: each in-process app closes its transport at shutdown, and one run uses
        this one for two apps (today's configuration, then the suggested one); `close` ends it."""

    async def close(self) -> None:
        await self._live.aclose()


@asynccontextmanager
async def in_process_proxy(
    settings: Settings, transport: httpx.AsyncBaseTransport
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the real app, the upstream behind `transport`."""
    app = create_app(settings, transport=transport)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://doctor", timeout=None
        ) as client,
    ):
        yield client


async def through_proxy(client: httpx.AsyncClient, body: bytes) -> httpx.Response:
    return await client.post(
        "/v1/chat/completions",
        content=body,
        headers={
            "content-type": "application/json",
            "authorization": f"Bearer {DOCTOR_TENANT}",
            "x-streamfix-debug": "1",  # the stream's repair counts, in a closing comment
        },
    )
