"""What every door of the proxy does with an exchange besides its own translation: admit the
request (keys, body limits), book it (record, log line, metrics, span) and head its answers,
send it upstream once (with the learned-refusal resend), and learn from its answer.

The app owns one `Exchanges` (server/app.py); the chat handler, the passthrough and the
fronts' runner (server/front_exchange.py) all go through it, so no door books, sends or learns
in a way of its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.learning.refusal_reading import read_refusal, resent
from proxy.learning.refusals import Learned, RefusalLearning
from proxy.learning.refused_parts import RefusedPart
from proxy.repair.forwarded import Forwarded
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import tenant_of
from proxy.routing.routes import (
    CHAT_PATH,
    UpstreamRoute,
    without_credential_parameters,
    without_parameters,
)
from proxy.server.auth import is_allowed
from proxy.server.body_limits import BodyBudget
from proxy.server.chat_request import read_body
from proxy.server.delivery import repairs_header
from proxy.server.errors import ClientError, error_response
from proxy.server.logs import log_exchange, log_learned
from proxy.server.metrics import Metrics
from proxy.server.record import ExchangeRecord
from proxy.server.retry_after import (
    RATE_LIMITED,
    client_stays,
    patience,
    retry_after_seconds,
    wait_to_allow,
)
from proxy.server.tracing import Tracing
from proxy.settings.schema import Settings
from proxy.upstream.context import UPSTREAM, UpstreamContext, client_copy_of
from proxy.upstream.failures import describe_failure, upstream_origin
from proxy.upstream.headers import RawHeaders, request_headers, response_headers
from proxy.upstream.http1 import RETRIED
from proxy.upstream.outgoing import outgoing_request

logger = logging.getLogger("proxy.server.app")  # the exchange's log line keeps its logger


def new_request_id() -> str:
    return os.urandom(16).hex()  # as unique as uuid4, without building a UUID object


def request_id_of(request: Request) -> str:
    """The client's `x-request-id`, else a new one."""
    return request.headers.get("x-request-id") or new_request_id()


def plain_record(request: Request, request_id: str, route: str, model: object) -> ExchangeRecord:
    """An exchange no repair runs on (a passthrough, a refusal): what its line and span name."""
    return ExchangeRecord(
        Tally(request_id), route=route, method=request.method, path=request.url.path, model=model
    )


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """Phase one run again for a learned refusal's resend: its own tally and Forwarded, and
    what the door adopts with them (a front's new translation), taken only if it goes up."""

    forwarded: Forwarded
    tally: Tally
    adopt: Callable[[], None] = lambda: None


PhaseOneAgain = Callable[[RouteRules], Awaitable[Rebuilt]]


@dataclass(slots=True)
class Exchanges:
    """Admission, bookkeeping, sending and learning, for one app's configuration."""

    settings: Settings
    transport: httpx.AsyncBaseTransport
    refusals: RefusalLearning
    metrics: Metrics
    tracing: Tracing | None
    """None unless OTEL_* asks for traces: each hook is then one attribute test."""
    proxy_keys: tuple[str, ...]
    body_budget: BodyBudget

    # ── admission and bookkeeping ──────────────────────────────────────────

    async def admitted_body(self, request: Request, request_id: str) -> bytes | Response:
        """The body of a request the proxy's keys and limits admit; else the refusal."""
        try:
            if self.proxy_keys and not is_allowed(request.headers, self.proxy_keys):
                raise ClientError(
                    401,
                    "a valid streamfix API key is required",
                    "invalid_api_key",
                    "authentication_error",
                )
            return await read_body(request, self.settings.server, self.body_budget)
        except ClientError as exc:
            return self.refused(exc, request, request_id)

    def refused(
        self, error: ClientError, request: Request, request_id: str, model: object = None
    ) -> Response:
        """A request refused before anything went upstream: logged and counted like the rest,
        with its model when the body named one."""
        return self.failed(plain_record(request, request_id, "-", model), error.response())

    def failed(self, record: ExchangeRecord, response: Response) -> Response:
        """The proxy's own answer for an exchange, booked and headed like the rest: an error,
        or an answer a front built whole."""
        self.finished(record, response.status_code)
        return headed(response, record)

    def record(
        self,
        request: Request,
        request_id: str,
        body: dict[str, Any],
        route: UpstreamRoute,
        started: float,
        door: str | None = None,
    ) -> ExchangeRecord:
        """A chat exchange's record, before its request phase, by the door it came in at."""
        return ExchangeRecord(
            Tally(request_id),
            route=route.name,
            method=request.method,
            path=request.scope["path"],  # the hot path's: request.url builds a URL
            model=body.get("model"),
            provider=route.provider,
            started=started,
            debug=request.headers.get("x-streamfix-debug") == "1",
            door=door,
        )

    def tenant(self, request: Request) -> str | None:
        """Every credential form the proxy forwards names the tenant, `?key=` included."""
        query = request.scope.get("query_string", b"")
        return tenant_of(request.headers, self.settings.receipts.tenant_header, query=query)

    def finished(self, record: ExchangeRecord, status: int) -> None:
        """One log line per exchange, and its counts into the metrics."""
        duration = time.monotonic() - record.started
        self.metrics.record(record.route, status, duration, record.tally.repairs)
        answer = record.tally.answer
        if answer is not None and answer.reported_usage:
            self.metrics.tokens(record.route, record.provider, record.model, answer)
        if self.tracing:
            self.tracing.finished(record, status)
        log_exchange(logger, record, status, duration)

    def answered(self, record: ExchangeRecord, route: UpstreamRoute, status: int) -> None:
        """A repaired exchange's end, after what its answer taught (upstream/answer_rules.py:
        `think_opened_by_template` learned from a `</think>` nothing opened; the model's input
        tokens per byte from the prompt it reported, learning/token_ratios.py)."""
        forwarded = record.forwarded
        if forwarded is not None:
            learned = self.refusals.answered(
                route.identity, forwarded.body.get("model"), forwarded.rules, record.tally.repairs
            )
            if learned is not None:
                record.tally.count(learned.kind, 1)
                log_learned(logger, record, learned)
            answer = record.tally.answer
            if (
                record.learns_tokens
                and answer is not None
                and answer.input_tokens
                and not record.sent_as_received
            ):
                self.refusals.tokens.learn(
                    route.identity,
                    forwarded.body,
                    record.tokens,
                    answer.input_tokens,
                    record.sent_bytes,
                )
        self.finished(record, status)

    @staticmethod
    def client_headers(upstream: httpx.Response, request_id: str, decoded: bool) -> RawHeaders:
        headers = response_headers(upstream.headers, decoded)
        headers.append((b"x-request-id", request_id.encode("latin-1")))
        return headers

    # ── upstream ───────────────────────────────────────────────────────────

    async def send(
        self,
        request: Request,
        route: UpstreamRoute,
        path: bytes,
        content: bytes,
        record: ExchangeRecord,
        resend: dict[str, Any] | None = None,
        rebuild: PhaseOneAgain | None = None,
        own_parameters: frozenset[str] = frozenset(),
    ) -> httpx.Response | Response:
        """Send the request upstream, and take back what the transport handed back with the
        answer (a recorder's copy). With `resend` (the forwarded chat body), a refusal the
        upstream answers before generating, of something the route learns, is sent once more
        without what it refused (upstream/refusals.py; `rebuild` runs the request phase again
        for a request rule), which the exchange counts and logs. The rebuilt phase one is
        adopted only when it is what went up: a rebuild that changes nothing leaves the
        exchange's own counts and Forwarded standing. A 429 whose `Retry-After` can be waited
        out is sent once more after it (server/retry_after.py): one resend at most, of either
        kind. `own_parameters` are the door's own query parameters: they stay here."""
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
                record, kind, request.method, request.scope["headers"], headers, route
            )
        query = request.scope.get("query_string", b"")
        door_parameters = 0
        if query and own_parameters:
            query, door_parameters = without_parameters(query, own_parameters)
        if query and (route.upstream_key or drop_credential):
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

        learned: Learned | None = None
        if resend is None or record.forwarded is None:
            upstream = await dispatch(outgoing)
        else:
            rebuilt: list[Rebuilt] = []

            async def again(rules: RouteRules) -> dict[str, Any]:
                assert rebuild is not None
                rebuilt.append(await rebuild(rules))  # aside until it is what went up
                return rebuilt[-1].forwarded.body

            upstream, learned = await self.refusals.send(
                dispatch,
                route.identity,
                resend,
                outgoing,
                record.forwarded.rules,
                again if rebuild is not None else None,
            )
            if learned is not None:
                if isinstance(learned.rule, RefusedPart):
                    record.refused_part = learned.rule
                record.sent_as_received = False  # the resend is the proxy's own encoding
                if rebuilt:
                    record.tally, record.forwarded = rebuilt[-1].tally, rebuilt[-1].forwarded
                    rebuilt[-1].adopt()
                record.tally.count(learned.kind, len(learned.keys))
                log_learned(logger, record, learned)
        if (
            learned is None  # one resend at most: none after a learned one
            and isinstance(upstream, httpx.Response)
            and upstream.status_code == RATE_LIMITED
        ):
            upstream = await self._after_rate_limit(request, route, outgoing, upstream, record)
        if door_parameters:  # on the tally that stands after a rebuild: they stayed here
            record.tally.count("door_query_parameter_dropped", door_parameters)
        if isinstance(upstream, httpx.Response):
            record.client_copy = client_copy_of(upstream)
        return upstream

    async def _after_rate_limit(
        self,
        request: Request,
        route: UpstreamRoute,
        outgoing: httpx.Request,
        limited: httpx.Response,
        record: ExchangeRecord,
    ) -> httpx.Response | Response:
        """A 429 the upstream says to come back from within the route's bound and the client's
        own read timeout: waited out and sent once more, that answer the one returned,
        whatever it is; else, or when the client leaves during the wait, the 429 as it came
        (its body read first, so the connection is free while waiting)."""
        delay = retry_after_seconds(limited.headers.get("retry-after"), time.time())
        bound = route.upstream.retry_after_max_seconds
        elapsed = time.monotonic() - record.started
        if not wait_to_allow(delay, bound, elapsed, patience(request.headers)):
            return limited
        assert delay is not None
        limited, _ = await read_refusal(limited)  # every byte kept, should it go out after all
        if not await client_stays(request.receive, delay):
            logger.info(
                "[%s] route %s: the client left during the 429's %.1f s wait; not sent again",
                record.request_id,
                route.name,
                delay,
            )
            return limited
        await limited.aclose()
        record.note(
            "rate_limit_resent",
            "route %s answered 429 with Retry-After %.1f s: waited and sent once more",
            route.name,
            delay,
        )
        return await self._dispatch(route, resent(outgoing, outgoing.content), record)

    async def _dispatch(
        self, route: UpstreamRoute, outgoing: httpx.Request, record: ExchangeRecord
    ) -> httpx.Response | Response:
        if logger.isEnabledFor(logging.DEBUG):
            # Method, host and path only: the query and the URL's userinfo may carry a key.
            url = outgoing.url
            where = f"{url.scheme}://{upstream_origin(url)}{url.path}"
            logger.debug("[%s] upstream %s %s", record.request_id, outgoing.method, where)
        started = time.monotonic()
        record.sent_bytes = len(outgoing.content)
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
            self.tracing.first_byte(record, ttfb, response.status_code)
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


def headed(response: Response, record: ExchangeRecord) -> Response:
    """The exchange's request id and repairs on a response the proxy built itself."""
    response.headers["x-request-id"] = record.request_id
    response.raw_headers.append(repairs_header(record.tally))
    return response


def after_first_segment(scope: Mapping[str, Any]) -> bytes:
    """The client's raw path after `/v1/`, as sent (the app normalised it once already)."""
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    return raw_path.lstrip(b"/").partition(b"/")[2]
