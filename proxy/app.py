"""The ASGI application: routes, and the lifespan that owns the one upstream client."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.chat_request import parse_chat_request, read_body
from proxy.errors import ClientError, error_event, error_response
from proxy.exchange import Exchange
from proxy.metrics import Metrics
from proxy.pipeline import RepairChain, repaired_stream
from proxy.profiles import profile_for
from proxy.recording import CASSETTE, UPSTREAM_LIMITS, upstream_transport
from proxy.repairs import default_repairs
from proxy.settings import Settings
from proxy.sse import EventTooLarge, SSEDecoder
from proxy.store import ReceiptStore, open_store
from proxy.tenancy import ReceiptScope, tenant_of, upstream_identity
from proxy.upstream import (
    client_timeout,
    describe_failure,
    request_headers,
    response_headers,
    upstream_url,
)

logger = logging.getLogger(__name__)

SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


class Proxy:
    """Request handlers bound to one configuration and one pooled upstream client."""

    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None):
        self.settings = settings
        self._transport = transport or upstream_transport(settings)
        self.client: httpx.AsyncClient | None = None
        self.store: ReceiptStore = open_store(settings.signatures)
        self.metrics = Metrics()
        self._upstream_identity = upstream_identity(settings.upstream.base_url)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(
            transport=self._transport,
            timeout=client_timeout(self.settings.upstream),
            limits=UPSTREAM_LIMITS,
            follow_redirects=False,
        ) as client:
            self.client = client
            try:
                yield
            finally:
                await self.store.aclose()
        self.client = None

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def chat_completions(self, request: Request) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            raw = await read_body(request, self.settings.server.max_request_bytes)
            body = parse_chat_request(raw)
        except ClientError as exc:
            return exc.response()
        exchange = self._exchange(request, request_id, body)
        chain = RepairChain(
            default_repairs(self.settings, exchange, self.store),
            strict=self.settings.repairs.strict,
        )
        content = orjson.dumps(body) if await chain.on_request(body) else raw
        upstream = await self._send(request, "chat/completions", content, request_id)
        if isinstance(upstream, Response):
            return upstream
        headers = response_headers(upstream.headers)
        headers["x-request-id"] = request_id
        is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        if upstream.status_code >= 400 or (body.get("stream") and not is_sse):
            # Errors and non-SSE bodies pass untouched.
            return self._relay(upstream, headers, lambda: self._finished(exchange, upstream))
        if body.get("stream"):
            return self._repaired_stream(upstream, chain, exchange, headers)
        response = await self._repaired_json(upstream, chain, headers)
        self._finished(exchange, upstream)
        return response

    def _finished(self, exchange: Exchange, upstream: httpx.Response) -> None:
        """One log line per exchange, and its repair counts into the process metrics."""
        self.metrics.record(exchange.repairs)
        logger.info(
            "[%s] model=%s profile=%s status=%d duration=%.3fs repairs=%s",
            exchange.request_id,
            exchange.request.get("model"),
            exchange.profile.name,
            upstream.status_code,
            time.monotonic() - exchange.started,
            ",".join(f"{kind}:{n}" for kind, n in sorted(exchange.repairs.items())) or "-",
        )

    def _exchange(self, request: Request, request_id: str, body: dict) -> Exchange:
        upstream = self.settings.upstream
        tenant = tenant_of(request.headers, self.settings.signatures.tenant_header)
        return Exchange(
            request_id=request_id,
            request=body,
            profile=profile_for(upstream.profile, upstream.base_url, body.get("model")),
            scope=ReceiptScope(tenant, self._upstream_identity),
        )

    async def passthrough(self, request: Request) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            raw = await read_body(request, self.settings.server.max_request_bytes)
        except ClientError as exc:
            return exc.response()
        path = request.path_params["path"]
        upstream = await self._send(request, path, raw, request_id)
        if isinstance(upstream, Response):
            return upstream
        headers = response_headers(upstream.headers)
        headers["x-request-id"] = request_id
        return self._relay(upstream, headers)

    async def _send(
        self, request: Request, path: str, content: bytes, request_id: str
    ) -> httpx.Response | Response:
        assert self.client is not None, "the lifespan owns the upstream client"
        outgoing = self.client.build_request(
            request.method,
            upstream_url(self.settings.upstream, path, request.url.query),
            headers=request_headers(request.headers.items(), request_id),
            content=content,
        )
        started = time.monotonic()
        try:
            return await self.client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:
            status, message, code = describe_failure(exc)
            logger.warning(
                "[%s] upstream %s failed after %.2fs: %s",
                request_id,
                path,
                time.monotonic() - started,
                type(exc).__name__,
            )
            return error_response(status, message, "upstream_error", code)

    def _relay(
        self,
        upstream: httpx.Response,
        headers: dict[str, str],
        on_close: Callable[[], None] = lambda: None,
    ) -> Response:
        return StreamingResponse(
            _closing(upstream, upstream.aiter_bytes(), on_close),
            status_code=upstream.status_code,
            headers=headers,
        )

    def _repaired_stream(
        self,
        upstream: httpx.Response,
        chain: RepairChain,
        exchange: Exchange,
        headers: dict[str, str],
    ) -> Response:
        def abort(exc: Exception) -> bytes:
            exchange.note("stream_aborted", "upstream stream failed: %s", type(exc).__name__)
            if isinstance(exc, EventTooLarge):
                return error_event(str(exc), "upstream_error", "event_too_large")
            _, message, code = describe_failure(exc)
            return error_event(message, "upstream_error", code)

        stream = repaired_stream(
            upstream.aiter_bytes(),
            chain,
            SSEDecoder(self.settings.server.max_event_bytes),
            (httpx.HTTPError, EventTooLarge),
            abort,
        )
        headers.update(SSE_HEADERS)
        return StreamingResponse(
            _closing(upstream, stream, lambda: self._finished(exchange, upstream)),
            status_code=upstream.status_code,
            headers=headers,
            media_type="text/event-stream",
        )

    async def _repaired_json(
        self, upstream: httpx.Response, chain: RepairChain, headers: dict[str, str]
    ) -> Response:
        try:
            raw = await upstream.aread()
        except httpx.HTTPError as exc:
            status, message, code = describe_failure(exc)
            return error_response(status, message, "upstream_error", code)
        finally:
            await upstream.aclose()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict) and await chain.on_response(body):
            raw = orjson.dumps(body)
        if (recording := upstream.extensions.get(CASSETTE)) is not None:
            recording.sent(raw)
            recording.save()
        return Response(
            raw,
            status_code=upstream.status_code,
            headers=headers,
            background=BackgroundTask(chain.on_close),
        )


async def _closing(
    upstream: httpx.Response,
    body: AsyncIterator[bytes],
    on_close: Callable[[], None] = lambda: None,
) -> AsyncIterator[bytes]:
    """Close the upstream response in the generator's own `finally`: on a client disconnect
    Starlette may never run a `background=` task. A recording transport also gets to see
    what the client was sent."""
    recording = upstream.extensions.get(CASSETTE)
    try:
        async for part in body:
            if recording is not None:
                recording.sent(part)
            yield part
    finally:
        await upstream.aclose()
        on_close()
        if recording is not None:
            recording.save()


def create_app(settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> Starlette:
    proxy = Proxy(settings, transport)
    routes = [
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
        Route(
            "/v1/{path:path}",
            proxy.passthrough,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
    ]
    app = Starlette(routes=routes, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app
