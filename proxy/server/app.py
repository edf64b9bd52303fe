"""The ASGI application: routes, and the lifespan that owns the one upstream client."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.learning.refusals import open_learning
from proxy.repair.phases import Phases
from proxy.repair.repairs import ChainOptions
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.routing.routes import CHAT_PATH, Router
from proxy.server import messages as messages_front
from proxy.server import responses_endpoint
from proxy.server.asgi import StreamfixApp, http_error, internal_error
from proxy.server.body_limits import BodyBudget
from proxy.server.chat_request import model_of, parse_chat_request
from proxy.server.delivery import relay, repaired_json, repaired_sse
from proxy.server.delivery_mode import Mode, delivery_mode
from proxy.server.errors import ClientError
from proxy.server.exchanges import (
    Exchanges,
    Rebuilt,
    after_first_segment,
    new_request_id,
    plain_record,
)
from proxy.server.front_exchange import FrontRunner
from proxy.server.gc_tuning import FrozenHeap
from proxy.server.logs import quiet_client_loggers
from proxy.server.messages import MESSAGES
from proxy.server.metrics import CONTENT_TYPE, Metrics
from proxy.server.paths import UnsafePath, checked_relative
from proxy.server.responses_endpoint import RESPONSES
from proxy.server.startup import shared_store_warnings, startup_line
from proxy.server.tracing import Tracing
from proxy.settings.chain import chain_options
from proxy.settings.schema import Settings
from proxy.settings.values import ConfigError, parse_keys
from proxy.store.opening import open_store
from proxy.store.protocol import Store as ReceiptStore
from proxy.upstream.body_decoding import decoder_for
from proxy.upstream.transports import upstream_transport
from proxy.wire import json_codec

logger = logging.getLogger(__name__)

PhasesFactory = Callable[[ChainOptions, ReceiptStore], Phases]
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
        self.store: ReceiptStore = open_store(settings.receipts, environ)
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
        # The Responses and Messages doors' one runner (front_exchange.py).
        self.fronts = FrontRunner(self.router, self.phases, self.store, self.exchanges)

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
        """The chat door, on its own path: no translation, and the client's own bytes go up
        when no repair changed them. Admission, bookkeeping, the send and the learning are the
        fronts' too (exchanges.py)."""
        exchanges = self.exchanges
        request_id = request.headers.get("x-request-id") or new_request_id()
        raw = await exchanges.admitted_body(request, request_id)
        if isinstance(raw, Response):
            return raw
        try:
            body = parse_chat_request(raw)
        except ClientError as exc:
            return exchanges.refused(exc, request, request_id, model_of(raw))
        route = self.router.route_for(body.get("model"))
        renamed = bool(route.upstream.model) and body.get("model") != route.upstream.model
        if renamed:
            body["model"] = route.upstream.model
        started = time.monotonic()  # the recall below is part of the exchange's time
        rules = route.rules(body.get("model"))
        recalled = await self.refusals.recall(route.identity, body, rules)
        record = exchanges.record(request, request_id, body, route, started)
        # Phase one: the request repairs, ending in what goes upstream (the client's own bytes
        # when nothing changed).
        scope = ReceiptScope(exchanges.tenant(request), route.identity)
        forwarded, changed = await self.phases.request(
            body, recalled.applied(rules), scope, record.tally
        )
        record.forwarded = forwarded
        content = json_codec.dumps(forwarded.body) if changed or renamed else raw

        async def rebuild(rules: RouteRules) -> Rebuilt:
            """Phase one again, on the client's request, with the rules a refusal called for
            (upstream/refusals.py): a fresh tally and Forwarded, so phase two knows what went
            up (tool names mapped back). Adopted only if it goes up (Exchanges.send)."""
            again = parse_chat_request(raw)
            if renamed:
                again["model"] = route.upstream.model
            tally = Tally(request_id)
            forwarded, _ = await self.phases.request(again, rules, scope, tally)
            return Rebuilt(forwarded, tally)

        upstream = await exchanges.send(
            request, route, CHAT_PATH, content, record, resend=forwarded.body, rebuild=rebuild
        )
        if isinstance(upstream, Response):
            return exchanges.failed(record, upstream)
        forwarded = record.forwarded  # a refusal's resend built it again
        assert forwarded is not None  # set by phase one above
        status = upstream.status_code
        headers = upstream.headers
        encoding = headers.get("content-encoding", "")  # an httpx lookup costs 1.5 µs: once
        delivery = delivery_mode(
            status, bool(forwarded.body.get("stream")), headers.get("content-type", ""), encoding
        )
        if delivery.mode is Mode.RELAY:
            if delivery.unrepaired_encoding is not None:
                record.note(
                    "unrepaired_encoding",
                    "relayed unrepaired: the proxy does not decode Content-Encoding %r",
                    delivery.unrepaired_encoding,
                )
            client_headers = exchanges.client_headers(upstream, request_id, decoded=False)
            return relay(
                upstream, record, client_headers, lambda: exchanges.finished(record, status)
            )
        decoder = decoder_for(encoding)
        assert decoder is not None  # delivery_mode relays what has none
        # Phase two: the stream links, built from what phase one decided.
        chain = self.phases.stream(forwarded, record.tally)

        def answered() -> None:
            exchanges.answered(record, route, status)

        client_headers = exchanges.client_headers(upstream, request_id, decoded=True)
        if delivery.mode is Mode.SSE:
            self.metrics.active_streams.inc()

            def stream_closed() -> None:
                self.metrics.active_streams.dec()
                answered()

            limit = self.settings.server.max_event_bytes
            return repaired_sse(
                upstream,
                chain,
                record,
                client_headers,
                limit,
                decoder,
                stream_closed,
                self.settings.server.keepalive_seconds,
            )
        return await repaired_json(
            upstream,
            chain,
            record,
            client_headers,
            decoder,
            self.settings.server.max_response_bytes,
            answered,
        )

    async def responses(self, request: Request) -> Response:
        """`POST /v1/responses`: the Responses front (responses_endpoint.py) on the runner."""
        return await self.fronts.run(RESPONSES, request)

    async def messages(self, request: Request) -> Response:
        """`POST /v1/messages`: Anthropic's Messages front (messages.py) on the runner."""
        return await self.fronts.run(MESSAGES, request)

    async def count_tokens(self, request: Request) -> Response:
        return await messages_front.count_tokens(self.exchanges, self.router, request)

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
        Route("/v1/responses", proxy.responses, methods=["POST"]),
        Route("/v1/responses/{rest:path}", responses_endpoint.not_offered),
        Route("/v1/messages", proxy.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", proxy.count_tokens, methods=["POST"]),
        # POST /v1/chat/completions is not here: StreamfixApp sends it straight to its handler
        # (one registration); its other methods are passthrough like any /v1/ path.
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
