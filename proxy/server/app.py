"""The ASGI application: routes, and the lifespan that owns the one upstream client."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.repair.phases import Phases
from proxy.repair.receipts.store import ReceiptStore, open_store
from proxy.repair.repairs import ChainOptions
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope, tenant_of
from proxy.server import messages as messages_front
from proxy.server import responses_endpoint
from proxy.server.asgi import StreamfixApp, http_error, internal_error
from proxy.server.auth import is_allowed
from proxy.server.body_limits import BodyBudget
from proxy.server.chat_request import model_of, parse_chat_request, read_body
from proxy.server.delivery import relay, repaired_json, repaired_sse, repairs_header
from proxy.server.delivery_mode import Mode, delivery_mode
from proxy.server.errors import ClientError, error_response
from proxy.server.gc_tuning import FrozenHeap
from proxy.server.logs import log_exchange, log_learned, quiet_client_loggers
from proxy.server.metrics import CONTENT_TYPE, Metrics
from proxy.server.paths import UnsafePath, checked_relative
from proxy.server.record import ExchangeRecord
from proxy.server.startup import startup_line
from proxy.server.tracing import Tracing
from proxy.settings.chain import chain_options
from proxy.settings.schema import Settings
from proxy.settings.values import ConfigError, parse_keys
from proxy.upstream.body_decoding import decoder_for
from proxy.upstream.context import UPSTREAM, UpstreamContext, client_copy_of
from proxy.upstream.failures import describe_failure, upstream_origin
from proxy.upstream.headers import RawHeaders, request_headers, response_headers
from proxy.upstream.http1 import RETRIED
from proxy.upstream.outgoing import outgoing_request
from proxy.upstream.refusals import Rebuild, open_learning
from proxy.upstream.routes import CHAT_PATH, Router, UpstreamRoute, without_credential_parameters
from proxy.upstream.transports import upstream_transport
from proxy.wire import json_codec
from proxy.wire.credentials import masked_url

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
        self.store: ReceiptStore = open_store(settings.receipts)
        self.phases = phases_factory(self.chain_options, self.store)
        # What upstreams refused before generating (400/422), and the one resend that follows.
        self.refusals = open_learning(settings)
        self.metrics = Metrics()
        self.body_budget = BodyBudget()  # one app per process: every connection's bodies
        # None unless OTEL_* asks for traces: each hook below is then one attribute test.
        self.tracing = Tracing.from_environ(environ)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        logger.info("%s", startup_line(self.settings, self.router, bool(self.proxy_keys)))
        if not await self.store.ping():
            logger.warning(
                "receipt store %s is unreachable: requests go through, but receipts are neither "
                "kept nor put back until it answers",
                masked_url(self.settings.receipts.store),
            )
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
        store_ok = await self.store.ping()
        ready = store_ok and self.started
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "store": store_ok},
            status_code=200 if ready else 503,
        )

    async def metrics_endpoint(self, request: Request) -> Response:
        self.metrics.store_errors.set(self.store.errors)
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)

    async def chat_completions(self, request: Request) -> Response:
        request_id = request.headers.get("x-request-id") or new_request_id()
        raw = await self._admitted_body(request, request_id)
        if isinstance(raw, Response):
            return raw
        try:
            body = parse_chat_request(raw)
        except ClientError as exc:
            return self._refused(exc, request, request_id, model_of(raw))
        route = self.router.route_for(body.get("model"))
        renamed = bool(route.upstream.model) and body.get("model") != route.upstream.model
        if renamed:
            body["model"] = route.upstream.model
        started = time.monotonic()  # the recall below is part of the exchange's time
        rules = route.rules(body.get("model"))
        recalled = await self.refusals.recall(route.identity, body, rules)
        record = self._record(request, request_id, body, route, started)
        # Phase one: the request repairs, ending in what goes upstream (the client's own bytes
        # when nothing changed).
        scope = ReceiptScope(self._tenant(request), route.identity)
        forwarded, changed = await self.phases.request(
            body, recalled.applied(rules), scope, record.tally
        )
        record.forwarded = forwarded
        content = json_codec.dumps(forwarded.body) if changed or renamed else raw

        async def rebuild(rules: RouteRules) -> dict[str, Any]:
            """Phase one again, on the client's request, with the rules a refusal called for
            (upstream/refusals.py): a fresh tally and Forwarded, so phase two knows what went
            up (tool names mapped back). The refused send's counts go with it."""
            again = parse_chat_request(raw)
            if renamed:
                again["model"] = route.upstream.model
            record.tally = Tally(request_id)
            record.forwarded, _ = await self.phases.request(again, rules, scope, record.tally)
            return record.forwarded.body

        upstream = await self._send(
            request, route, CHAT_PATH, content, record, resend=forwarded.body, rebuild=rebuild
        )
        if isinstance(upstream, Response):
            return self._failed(record, upstream)
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
            client_headers = self._client_headers(upstream, request_id, decoded=False)
            return relay(upstream, record, client_headers, lambda: self._finished(record, status))
        decoder = decoder_for(encoding)
        assert decoder is not None  # delivery_mode relays what has none
        # Phase two: the stream links, built from what phase one decided.
        chain = self.phases.stream(forwarded, record.tally)

        def answered() -> None:
            """The exchange's end, after what its answer taught (upstream/answer_rules.py)."""
            assert forwarded is not None
            learned = self.refusals.answered(
                route.identity, forwarded.body.get("model"), forwarded.rules, record.tally.repairs
            )
            if learned is not None:
                record.tally.count(learned.kind, 1)
                log_learned(logger, record, learned)
            self._finished(record, status)

        client_headers = self._client_headers(upstream, request_id, decoded=True)
        if delivery.mode is Mode.SSE:
            self.metrics.active_streams.inc()

            def stream_closed() -> None:
                self.metrics.active_streams.dec()
                answered()

            limit = self.settings.server.max_event_bytes
            return repaired_sse(
                upstream, chain, record, client_headers, limit, decoder, stream_closed
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
        """`POST /v1/responses`: the Responses front around the chat exchange."""
        return await responses_endpoint.responses(self, request)

    async def messages(self, request: Request) -> Response:
        """Anthropic's Messages API over the chat core (proxy/server/messages.py)."""
        return await messages_front.messages(self, request)

    async def count_tokens(self, request: Request) -> Response:
        return await messages_front.count_tokens(self, request)

    async def passthrough(self, request: Request) -> Response:
        request_id = request.headers.get("x-request-id") or new_request_id()
        raw = await self._admitted_body(request, request_id)
        if isinstance(raw, Response):
            return raw
        model = model_of(raw)
        route = self.router.route_for(model)
        record = _plain_record(request, request_id, route.name, model)
        try:
            path = checked_relative(_after_first_segment(request.scope))
        except UnsafePath as exc:
            error = ClientError(400, str(exc), "invalid_path")
            return self._refused(error, request, request_id, model)
        upstream = await self._send(request, route, path, raw, record)
        if isinstance(upstream, Response):
            return self._failed(record, upstream)
        headers = self._client_headers(upstream, request_id, decoded=False)
        status = upstream.status_code
        return relay(upstream, record, headers, lambda: self._finished(record, status))

    async def _admitted_body(self, request: Request, request_id: str) -> bytes | Response:
        """The body of a request the proxy's keys and limits admit; else the refusal."""
        try:
            self._authorize(request)
            return await read_body(request, self.settings.server, self.body_budget)
        except ClientError as exc:
            return self._refused(exc, request, request_id)

    def _refused(
        self, error: ClientError, request: Request, request_id: str, model: object = None
    ) -> Response:
        """A request refused before anything went upstream: logged and counted like the rest,
        with its model when the body named one."""
        return self._failed(_plain_record(request, request_id, "-", model), error.response())

    def _failed(self, record: ExchangeRecord, response: Response) -> Response:
        """The proxy's own error response for an exchange: booked, and headed like the rest."""
        self._finished(record, response.status_code)
        response.headers["x-request-id"] = record.request_id
        response.raw_headers.append(repairs_header(record.tally))
        return response

    def _authorize(self, request: Request) -> None:
        if self.proxy_keys and not is_allowed(request.headers, self.proxy_keys):
            raise ClientError(
                401,
                "a valid streamfix API key is required",
                "invalid_api_key",
                "authentication_error",
            )

    def _record(
        self,
        request: Request,
        request_id: str,
        body: dict[str, Any],
        route: UpstreamRoute,
        started: float,
    ) -> ExchangeRecord:
        """A chat exchange's record, before its request phase."""
        return ExchangeRecord(
            Tally(request_id),
            route=route.name,
            method=request.method,
            path=request.scope["path"],  # the hot path's: request.url builds a URL
            model=body.get("model"),
            started=started,
            debug=request.headers.get("x-streamfix-debug") == "1",
        )

    def _tenant(self, request: Request) -> str | None:
        """Every credential form the proxy forwards names the tenant, `?key=` included."""
        query = request.scope.get("query_string", b"")
        return tenant_of(request.headers, self.settings.receipts.tenant_header, query=query)

    async def _send(
        self,
        request: Request,
        route: UpstreamRoute,
        path: bytes,
        content: bytes,
        record: ExchangeRecord,
        resend: dict[str, Any] | None = None,
        rebuild: Rebuild | None = None,
    ) -> httpx.Response | Response:
        """Send the request upstream, and take back what the transport handed back with the
        answer (a recorder's copy). With `resend` (the forwarded chat body), a refusal the
        upstream answers before generating, of something the route learns, is sent once more
        without what it refused (upstream/refusals.py; `rebuild` runs the request phase again
        for a request rule), which the exchange counts and logs."""
        drop_credential = bool(self.proxy_keys)
        headers = request_headers(
            request.scope["headers"],
            record.request_id,
            credential=route.upstream_key,
            drop_credential=drop_credential,
        )
        if self.tracing:
            kind = "chat" if path == CHAT_PATH else "passthrough"
            headers = self.tracing.start(
                record, kind, request.method, request.scope["headers"], headers
            )
        query = request.scope.get("query_string", b"")
        if route.upstream_key or drop_credential:
            query = without_credential_parameters(query)
        outgoing = outgoing_request(
            request.method,
            route.url(path, query),
            headers,
            content,
            {
                "timeout": route.timeout.as_dict(),
                UPSTREAM: UpstreamContext(route.upstream.base_url, record.profile),
            },
        )

        async def dispatch(outgoing: httpx.Request) -> httpx.Response | Response:
            return await self._dispatch(route, outgoing, record)

        if resend is None or record.forwarded is None:
            upstream = await dispatch(outgoing)
        else:
            upstream, learned = await self.refusals.send(
                dispatch, route.identity, resend, outgoing, record.forwarded.rules, rebuild
            )
            if learned is not None:
                record.tally.count(learned.kind, len(learned.keys))
                log_learned(logger, record, learned)
        if isinstance(upstream, httpx.Response):
            record.client_copy = client_copy_of(upstream)
        return upstream

    async def _dispatch(
        self, route: UpstreamRoute, outgoing: httpx.Request, record: ExchangeRecord
    ) -> httpx.Response | Response:
        if logger.isEnabledFor(logging.DEBUG):
            # Method, host and path only: the query and the URL's userinfo may carry a key.
            url = outgoing.url
            where = f"{url.scheme}://{upstream_origin(url)}{url.path}"
            logger.debug("[%s] upstream %s %s", record.request_id, outgoing.method, where)
        started = time.monotonic()
        try:
            response = await self._send_upstream(outgoing, record)
            response.request = outgoing
        except httpx.HTTPError as exc:
            # Host and port of the route's upstream, never its path or query (they may hold a key)
            status, message, code = describe_failure(exc, upstream_origin(outgoing.url))
            logger.warning(
                "[%s] route %s: upstream failed after %.2fs: %s: %s",
                record.request_id,
                route.name,
                time.monotonic() - started,
                type(exc).__name__,
                message,
            )
            failure = error_response(status, message, "upstream_error", code)
            failure.headers["x-request-id"] = record.request_id
            return failure
        ttfb = time.monotonic() - started
        self.metrics.first_byte(route.name, ttfb)
        if self.tracing:
            self.tracing.first_byte(record, ttfb)
        return response

    async def _send_upstream(
        self, outgoing: httpx.Request, record: ExchangeRecord
    ) -> httpx.Response:
        """The request goes upstream once: the app never sends it again by itself (but for a
        refusal named in a 400/422, once, by upstream/refusals.py). Only the
        transport knows whether its connection was reused and whether anything came back, so
        it decides when a second send provably does no harm (Http1Transport) and says so in the
        response; httpx's transport never sends twice once a request is written."""
        try:
            response = await self.transport.handle_async_request(outgoing)
        except httpx.RemoteProtocolError as exc:
            # What the upstream did, in the transport's words (no request header or URL in them).
            logger.warning("[%s] upstream broke the exchange: %.300s", record.request_id, exc)
            raise
        retried = response.extensions.get(RETRIED)
        if retried:
            record.note("upstream_retried", "%s", retried)
        return response

    @staticmethod
    def _client_headers(upstream: httpx.Response, request_id: str, decoded: bool) -> RawHeaders:
        headers = response_headers(upstream.headers, decoded)
        headers.append((b"x-request-id", request_id.encode("latin-1")))
        return headers

    def _finished(self, record: ExchangeRecord, status: int) -> None:
        """One log line per exchange, and its counts into the metrics."""
        duration = time.monotonic() - record.started
        self.metrics.record(record.route, status, duration, record.tally.repairs)
        if self.tracing:
            self.tracing.finished(record, status)
        log_exchange(logger, record, status, duration)


def _plain_record(request: Request, request_id: str, route: str, model: object) -> ExchangeRecord:
    """An exchange no repair runs on (a passthrough, a refusal): what its line and span name."""
    return ExchangeRecord(
        Tally(request_id), route=route, method=request.method, path=request.url.path, model=model
    )


def _after_first_segment(scope: Mapping[str, Any]) -> bytes:
    """The client's raw path after `/v1/`, as sent (the app normalised it once already)."""
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    return raw_path.lstrip(b"/").partition(b"/")[2]


def new_request_id() -> str:
    return os.urandom(16).hex()  # as unique as uuid4, without building a UUID object


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
