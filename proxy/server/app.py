"""The ASGI application: routes, and the lifespan that owns the one upstream client."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from proxy.learning.refusals import open_learning
from proxy.repair.phases import Phases
from proxy.repair.repairs import ChainOptions
from proxy.routing.routes import Router
from proxy.server.asgi import StreamfixApp, http_error, internal_error
from proxy.server.body_limits import BodyBudget
from proxy.server.chat_request import model_of
from proxy.server.codex_models import asks_for_codex_catalog, codex_models
from proxy.server.count_tokens import count_tokens
from proxy.server.delivery import relay
from proxy.server.door_socket import serve_door_socket
from proxy.server.doors import DOORS
from proxy.server.doors.chat import CHAT
from proxy.server.doors.door import Door
from proxy.server.doors.responses import RESPONSES, not_offered
from proxy.server.errors import ClientError
from proxy.server.exchange_runner import ExchangeRunner
from proxy.server.exchanges import Exchanges, after_first_segment, new_request_id, plain_record
from proxy.server.gc_tuning import FrozenHeap
from proxy.server.logs import quiet_client_loggers
from proxy.server.metrics import CONTENT_TYPE, Metrics
from proxy.server.paths import UnsafePath, checked_relative
from proxy.server.startup import shared_store_warnings, startup_line
from proxy.server.tracing import Tracing
from proxy.settings.chain import chain_options
from proxy.settings.schema import Settings
from proxy.settings.values import ConfigError, parse_keys
from proxy.store.opening import open_store
from proxy.store.protocol import Store
from proxy.upstream.transports import upstream_transport

logger = logging.getLogger(__name__)

PhasesFactory = Callable[[ChainOptions, Store], Phases]
"""Builds the app's two phases (once); `streamfix explain` passes one that attributes."""


class Proxy:
    """Request handlers bound to one configuration and one pooled upstream client."""

    def __init__(
        self,
        settings: Settings,
        transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
        phases_factory: PhasesFactory = Phases,
    ) -> None:
        environ = os.environ if environ is None else environ
        self.environ = environ
        self.chain_options = chain_options(settings)
        quiet_client_loggers()
        self.settings = settings
        self.router = Router(settings, environ)
        self.proxy_keys = parse_keys(environ.get("STREAMFIX_API_KEYS"))
        if self.router.holds_keys and not self.proxy_keys:
            raise ConfigError(
                "STREAMFIX_API_KEYS: must be set when a route holds its own upstream key, "
                "or anyone who can reach the proxy could spend that key"
            )
        # The transport itself, not an AsyncClient around it: the proxy needs none of a client's
        # cookies, auth flows, redirects or URL merging, and they cost more than the relay.
        self.transport = transport or upstream_transport(settings, environ)
        self.started = False
        self.store: Store = open_store(settings.receipts, environ)
        self.phases = phases_factory(self.chain_options, self.store)
        # What upstreams refused before generating (400/422), and the one resend that follows.
        self.refusals = open_learning(settings, self.store)
        self.metrics = metrics = Metrics()
        self.body_budget = budget = BodyBudget()  # one app per process: every connection's
        # Admission, bookkeeping, sending and learning, shared by every door (exchanges.py).
        # Tracing is None unless OTEL_* asks for traces: each hook is then one attribute test.
        tracing = Tracing.from_environ(environ)
        self.exchanges = Exchanges(
            settings, self.transport, self.refusals, metrics, tracing, self.proxy_keys, budget
        )
        # Every door's one runner (exchange_runner.py).
        self.runner = ExchangeRunner(self.router, self.phases, self.store, self.exchanges)

    @property
    def tracing(self) -> Tracing | None:
        return self.exchanges.tracing

    @tracing.setter
    def tracing(self, tracing: Tracing | None) -> None:
        self.exchanges.tracing = tracing

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        logger.info("%s", startup_line(self.settings, self.router, bool(self.proxy_keys)))
        for warning in shared_store_warnings(self.settings, self.environ):
            logger.warning("%s", warning)
        await self.store.ping()  # a store that does not answer is said now (store_health.py)
        heap = FrozenHeap.start() if self.settings.server.gc_freeze else None
        self.started = True
        try:
            yield
        finally:
            self.started = False
            if heap is not None:
                heap.stop()
            await self.transport.aclose()
            await self.store.aclose()
            await self.refusals.aclose()
            if self.tracing:
                self.tracing.shutdown()

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Ready once started, whether or not the receipt store answers: a replica that cannot
        reach Redis still serves every request (without receipts), and so does every other
        replica on that Redis. Taking them out of rotation would turn a receipts outage into a
        full one, so the store's state is in the body (`"store": false`) and in
        `streamfix_store_up`, for the operator's alerts, not in the status."""
        store_ok = await self.store.ping()
        self.metrics.store_state(store_ok, self.store.errors)
        return JSONResponse(
            {"status": "ready" if self.started else "not ready", "store": store_ok},
            status_code=200 if self.started else 503,
        )

    async def metrics_endpoint(self, request: Request) -> Response:
        self.metrics.store_state(self.store.answering, self.store.errors)
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)

    async def chat_completions(self, request: Request) -> Response:
        """The chat door (doors/chat.py), the hot path: StreamfixApp sends its POSTs here
        straight."""
        return await self.runner.run(CHAT, request)

    def door_endpoint(self, door: Door[Any, Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self.runner.run(door, request)

        return endpoint

    def door_socket(self, door: Door[Any, Any]) -> Callable[[WebSocket], Awaitable[None]]:
        """The door over a WebSocket (door_socket.py), on the same runner."""

        async def endpoint(websocket: WebSocket) -> None:
            await serve_door_socket(self.runner, door, websocket)

        return endpoint

    async def count_tokens(self, request: Request) -> Response:
        return await count_tokens(self.exchanges, self.router, request)

    async def models(self, request: Request) -> Response:
        """Codex's catalog fetch is answered here (codex_models.py); any other listing is the
        upstream's."""
        if asks_for_codex_catalog(request):
            return await codex_models(self.exchanges, self.router, request)
        return await self.passthrough(request)

    async def passthrough(self, request: Request) -> Response:
        exchanges = self.exchanges
        request_id = request.headers.get("x-request-id") or new_request_id()
        raw = await exchanges.admitted_body(request, request_id)
        if isinstance(raw, Response):
            return raw
        model = model_of(raw)
        route = self.router.route_for(model)
        record = plain_record(request, request_id, route.name, model)
        try:
            path = checked_relative(after_first_segment(request.scope))
        except UnsafePath as exc:
            error = ClientError(400, str(exc), "invalid_path")
            return exchanges.refused(error, request, request_id, model)
        upstream = await exchanges.send(request, route, path, raw, record)
        if isinstance(upstream, Response):
            return exchanges.failed(record, upstream)
        headers = exchanges.client_headers(upstream, request_id, decoded=False)
        status = upstream.status_code
        return relay(upstream, record, headers, lambda: exchanges.finished(record, status))


def create_app(
    settings: Settings,
    transport: httpx.AsyncBaseTransport | None = None,
    phases_factory: PhasesFactory = Phases,
) -> StreamfixApp:
    proxy = Proxy(settings, transport, phases_factory=phases_factory)
    endpoints = [
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/readyz", proxy.readyz, methods=["GET"]),
        Route("/metrics", proxy.metrics_endpoint, methods=["GET"]),
        # POST /v1/chat/completions is not here: StreamfixApp sends it straight to its handler
        # (one registration); its other methods are passthrough like any /v1/ path.
        *(
            Route(door.path, proxy.door_endpoint(door), methods=["POST"])
            for door in DOORS
            if door is not CHAT
        ),
        # Codex's Responses transport when its provider says `supports_websockets = true`.
        WebSocketRoute(RESPONSES.path, proxy.door_socket(RESPONSES)),
        # Every method: a POST (`/compact`, `/cancel`) must not fall through to the upstream.
        Route("/v1/responses/{rest:path}", not_offered, methods=["GET", "POST", "DELETE"]),
        Route("/v1/messages/count_tokens", proxy.count_tokens, methods=["POST"]),
        Route("/v1/models", proxy.models, methods=["GET"]),
        Route(
            "/v1/{path:path}",
            proxy.passthrough,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
    ]
    app = StreamfixApp(
        proxy.chat_completions,
        routes=endpoints,
        lifespan=proxy.lifespan,
        exception_handlers={Exception: internal_error, HTTPException: http_error},
    )
    app.state.proxy = proxy
    return app
