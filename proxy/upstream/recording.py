"""Recording and replaying the upstream: two httpx transports, so every other line of the proxy
runs exactly as it does live."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from proxy.upstream.cassette_files import CassetteShelf, CassetteWriter
from proxy.upstream.cassettes import (
    Cassette,
    Chunk,
    canonical_request,
    request_key,
    safe_headers,
    safe_query,
)
from proxy.upstream.context import CLIENT_COPY, context_of
from proxy.wire import json_codec
from proxy.wire.credentials import masked_url

logger = logging.getLogger(__name__)

REPLAY_MISS_STATUS = 404
"""A request no cassette matches: no recording of it was found. Not 502 or any status the
OpenAI and AI SDKs retry (408, 409, 429, >= 500), which turned one miss into four identical
requests and a slow test; not 400 or 422 either, which the proxy's refusal learning reads as
the upstream naming a parameter it rejects (a miss differing at `body.temperature` would drop
temperature and ask again)."""


def relative_path(request: httpx.Request, default_base_url: str) -> str:
    context = context_of(request)
    base_url = context.base_url if context else default_base_url
    url = request.url
    base = urlsplit(base_url).path.rstrip("/")
    path = url.path
    return (path[len(base) :] if base and path.startswith(base) else path).lstrip("/")


class RecordingTransport(httpx.AsyncBaseTransport):
    """Sends through `inner` and notes everything that came back, chunk by chunk. What the
    client was sent only the server knows: the cassette's writer goes back with the response
    (`CLIENT_COPY`), and the server's delivery fills and saves it when the exchange is over."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        directory: Path,
        base_url: str,
        secret_headers: frozenset[str] = frozenset(),
    ) -> None:
        self._inner = inner
        self._shelf = CassetteShelf(directory)
        self._base_url = base_url
        self._secret = secret_headers

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        context = context_of(request)
        cassette = Cassette(
            method=request.method,
            path=relative_path(request, self._base_url),
            upstream_base_url=masked_url(context.base_url if context else self._base_url),
            profile=context.profile if context else "",
            query=safe_query(request.url.query.decode()),
            request_headers=safe_headers(request.headers, self._secret),
            request_body=request.content,
            status=response.status_code,
            response_headers=safe_headers(response.headers, self._secret),
        )
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_RecordedStream(response.stream, cassette),
            extensions={**response.extensions, CLIENT_COPY: self._writer(cassette)},
        )

    def _writer(self, cassette: Cassette) -> CassetteWriter:
        return CassetteWriter(cassette, self._shelf, self._secret)

    async def aclose(self) -> None:
        """The lifespan's close: every cassette handed over is on disk before it returns."""
        try:
            await self._shelf.aclose()
        finally:
            await self._inner.aclose()


class _RecordedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, cassette: Cassette) -> None:
        self._inner = inner
        self._cassette = cassette
        self._started = time.monotonic()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self._inner:
            self._cassette.chunks.append(Chunk(time.monotonic() - self._started, bytes(data)))
            yield data

    async def aclose(self) -> None:
        await self._inner.aclose()


class ReplayTransport(httpx.AsyncBaseTransport):
    """Serves recorded exchanges with no network: a request gets the cassette recorded for the
    same method, path and body (volatile fields aside), chunk boundaries and all.

    The body compared is the one the proxy sends upstream, after its request repairs. All of
    them but one depend only on the client's request; the receipt repair also depends on its
    store (what earlier turns taught this process), so the fields it writes are left out of the
    match (`cassettes.ProxyWrittenFields`): a follow-up turn replays alone, in any order, in
    parallel workers. Everything the client sent is still compared, and an unmatched request's
    404 names a field the client can change."""

    def __init__(self, cassettes: list[Cassette], base_url: str, timing: bool = False) -> None:
        self._base_url = base_url
        self._timing = timing
        self._cassettes = cassettes
        self._by_key: dict[str, list[Cassette]] = {}
        for cassette in cassettes:
            self._by_key.setdefault(cassette.key(), []).append(cassette)
        self._served: dict[str, int] = {}

    @classmethod
    def from_directory(
        cls, directory: Path, base_url: str, timing: bool = False
    ) -> ReplayTransport:
        files = sorted(directory.glob("*.json"))
        if not files:
            raise FileNotFoundError(f"no cassettes in {directory}")
        return cls([Cassette.load(path) for path in files], base_url, timing)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = relative_path(request, self._base_url)
        body = await request.aread()
        key = request_key(request.method, path, body)
        matches = self._by_key.get(key)
        if not matches:
            return self._unmatched(request.method, path, body)
        cassette = self._next(key, matches, request_key(request.method, path, body, exact=True))
        return httpx.Response(
            status_code=cassette.status,
            headers=cassette.response_headers,
            stream=_ReplayedStream(cassette.chunks, self._timing),
        )

    def _next(self, key: str, matches: list[Cassette], exact_key: str) -> Cassette:
        """One of the cassettes recorded for this request. Those recorded with the very same
        receipts come first; the others differ only where the proxy's store decided what went
        upstream, which says nothing about the client. The same request again (a client retry)
        gets the next recording of it, round robin."""
        exact = [cassette for cassette in matches if cassette.exact_key() == exact_key]
        candidates = exact or matches
        served = self._served.get(key, 0)
        self._served[key] = served + 1
        cassette = candidates[served % len(candidates)]
        if not exact:
            name = cassette.file.name if cassette.file else "a cassette"
            logger.debug("replay: %s matched with the proxy's receipt fields set aside", name)
        return cassette

    def _unmatched(self, method: str, path: str, body: bytes) -> httpx.Response:
        wanted = json_codec.loads(canonical_request(method, path, body))
        nearest, difference = None, "no cassette was recorded"
        best = -1
        for cassette in self._cassettes:
            recorded = json_codec.loads(
                canonical_request(cassette.method, cassette.path, cassette.request_body)
            )
            score = _similarity(wanted, recorded)
            if score > best:
                best, nearest = score, cassette
                difference = first_difference(recorded, wanted) or "(identical)"
        name = nearest.file.name if nearest and nearest.file else "none"
        message = (
            f"streamfix replay: no cassette matches this {method} /{path} request; "
            f"the nearest is {name}, which differs at {difference}"
        )
        logger.warning("%s", message)
        error = {
            "error": {"message": message, "type": "replay_error", "code": "no_matching_cassette"}
        }
        return httpx.Response(REPLAY_MISS_STATUS, json=error)


class _ReplayedStream(httpx.AsyncByteStream):
    def __init__(self, chunks: list[Chunk], timing: bool) -> None:
        self._chunks = chunks
        self._timing = timing

    async def __aiter__(self) -> AsyncIterator[bytes]:
        started = time.monotonic()
        for chunk in self._chunks:
            if self._timing:
                await anyio.sleep(max(0.0, chunk.at - (time.monotonic() - started)))
            yield chunk.data

    async def aclose(self) -> None:
        return None


def first_difference(recorded: Any, wanted: Any, path: str = "") -> str | None:
    """The first field path (`body.messages[2].content`) where two requests differ."""
    if isinstance(recorded, dict) and isinstance(wanted, dict):
        for key in sorted(set(recorded) | set(wanted)):
            if key not in recorded or key not in wanted:
                return f"{path}.{key}".lstrip(".")
            found = first_difference(recorded[key], wanted[key], f"{path}.{key}")
            if found:
                return found.lstrip(".")
        return None
    if isinstance(recorded, list) and isinstance(wanted, list):
        for index, (a, b) in enumerate(zip(recorded, wanted, strict=False)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found.lstrip(".")
        if len(recorded) != len(wanted):
            return f"{path}[{min(len(recorded), len(wanted))}]".lstrip(".")
        return None
    return None if recorded == wanted else (path.lstrip(".") or "(the whole body)")


def _similarity(a: Any, b: Any) -> int:
    """How much of two requests agrees: equal fields, and messages position by position (an
    equal one counts extra; a differing one still counts its equal fields, so a follow-up with
    one changed call is nearest to its own recording, not to the shorter turn before it)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return sum(_similarity(a[k], b[k]) for k in set(a) & set(b))
    if isinstance(a, list) and isinstance(b, list):
        return sum((x == y) + _similarity(x, y) for x, y in zip(a, b, strict=False))
    return 1 if a == b else 0
