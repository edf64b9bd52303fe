"""OpenTelemetry: a span per exchange, continuing the client's W3C trace, and for a chat
exchange (any door) a child span for its upstream call, whose context is sent upstream.

On only when the standard `OTEL_*` environment names an exporter and the optional extra
`streamfix[otel]` is installed; otherwise `Tracing.from_environ` returns None, the proxy holds
None and skips every hook, and nothing here imports opentelemetry (the module itself imports
only the standard library, so the hot path pays for an attribute test and nothing else).

The exchange's span (SERVER) holds what the log line holds, and never more: the route, the
model, the status, upstream time to first byte, the duration, and the repair counts (one span
event per kind, with its `count`). The upstream call's span (CLIENT, named `chat {model}`)
follows OpenTelemetry's GenAI conventions (gen_ai_attributes.py): provider, operation, request
and response model, response id, finish reasons, reported token usage. Never a credential, a
query string, prompt or response text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.server.gen_ai_attributes import (
    answer_attributes,
    call_attributes,
    call_span_name,
)
from proxy.upstream.headers import RawHeaders

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.trace import Span, TracerProvider

    from proxy.routing.routes import UpstreamRoute
    from proxy.server.record import ExchangeRecord

logger = logging.getLogger(__name__)

# The W3C trace-context fields: the client's are read for the parent, and replaced upstream by
# the proxy's own (one traceparent, not two).
TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})
# Exporter names of OTEL_TRACES_EXPORTER, and the entry points in the SDK's own group that
# implement them: "otlp" is the spec's default, over the protocol OTEL_*_PROTOCOL names.
_OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
_EXPORTER_GROUP = "opentelemetry_traces_exporter"
_SPAN_NAMES = {"chat": "streamfix chat", "passthrough": "streamfix passthrough"}
# What makes an upstream call that answered 2xx an error all the same (tally kinds).
_CALL_ERRORS = ("stream_aborted", "upstream_error_event")


@dataclass(slots=True)
class ExchangeSpans:
    """An exchange's spans while it runs (`ExchangeRecord.trace`)."""

    server: Span
    call: Span | None = None
    """The upstream call's, for a chat exchange."""
    upstream_status: int | None = None
    """The status the upstream answered with, once it did."""


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint or an exporter that is not
    "none", and the SDK not disabled (OTEL_SDK_DISABLED, the standard off switch)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class Tracing:
    """Spans for exchanges, from one tracer provider (the environment's, or a test's)."""

    def __init__(self, provider: TracerProvider, owned: SdkTracerProvider | None = None) -> None:
        """`owned`: `provider` again when it was built here, the SDK's, which `shutdown` flushes
        and stops (a test's provider is its own)."""
        # Imported here, never at module level: off, the proxy must not load opentelemetry.
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from proxy import __version__

        self._trace = trace
        self._tracer = provider.get_tracer("streamfix", __version__)
        self._provider = provider
        self._owned = owned
        self._propagator = TraceContextTextMapPropagator()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Tracing | None:
        """Tracing as the OTEL_* environment configures it, or None when it asks for none,
        when the extra is not installed, or when its exporter is not (one warning each)."""
        if not wanted(environ):
            return None
        try:
            provider = _provider_from_environ(environ)
        except ImportError as exc:
            logger.warning(
                "OTEL_* is set but OpenTelemetry is not installed (%s): tracing is off; "
                "install streamfix[otel] to turn it on",
                exc.name or exc,
            )
            return None
        except LookupError as exc:
            logger.warning("OTEL_TRACES_EXPORTER: %s: tracing is off", exc.args[0])
            return None
        return cls(provider, owned=provider)

    def start(
        self,
        record: ExchangeRecord,
        kind: str,
        method: str,
        incoming: Iterable[tuple[bytes, bytes]],
        outgoing: RawHeaders,
        route: UpstreamRoute | None = None,
    ) -> RawHeaders:
        """Open the exchange's span as a child of the client's trace, if it sent one, and for
        a chat exchange (its request phase ran) the upstream call's span under it; return the
        upstream headers with the innermost span as their traceparent."""
        parent = self._propagator.extract(_header_map(incoming))
        span = self._tracer.start_span(
            _SPAN_NAMES.get(kind, f"streamfix {kind}"),
            context=parent,
            kind=self._trace.SpanKind.SERVER,
            start_time=_wall_ns(record.started),
            attributes=_request_attributes(record, method),
        )
        spans = record.trace = ExchangeSpans(span)
        context = self._trace.set_span_in_context(span)
        if record.forwarded is not None and route is not None:
            spans.call = self._tracer.start_span(
                call_span_name(record),
                context=context,
                kind=self._trace.SpanKind.CLIENT,
                attributes=call_attributes(record, route),
            )
            context = self._trace.set_span_in_context(spans.call)
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=context)
        kept = [(name, value) for name, value in outgoing if name not in TRACE_HEADERS]
        return [*kept, *((k.encode(), v.encode()) for k, v in carrier.items())]

    def first_byte(self, record: ExchangeRecord, seconds: float, status: int) -> None:
        """The upstream's response head arrived: its time, and its status on the call."""
        spans: ExchangeSpans | None = record.trace
        if spans is None:
            return
        spans.server.set_attribute("streamfix.upstream.ttfb_s", seconds)
        spans.upstream_status = status
        if spans.call is not None:
            spans.call.set_attribute("http.response.status_code", status)

    def finished(self, record: ExchangeRecord, status: int) -> None:
        """Close the exchange's spans (called once, from the proxy's `_finished`). A request
        refused before it was routed has no span yet: it gets one from its start to now."""
        spans: ExchangeSpans | None = record.trace
        record.trace = None  # a second call, if one ever came, must not end them twice
        if spans is None:
            span = self._tracer.start_span(
                "streamfix refused",
                kind=self._trace.SpanKind.SERVER,
                start_time=_wall_ns(record.started),
                attributes=_request_attributes(record, None),
            )
        else:
            span = spans.server
            if spans.call is not None:
                self._end_call(spans.call, record, spans.upstream_status, status)
        if not span.is_recording():
            span.end()
            return
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("streamfix.duration_s", time.monotonic() - record.started)
        total = 0
        for kind, count in sorted(record.tally.repairs.items()):
            # Attributes are what trace backends filter on; the events mark each kind.
            span.set_attribute(f"streamfix.repairs.{kind}", count)
            span.add_event(kind, {"count": count})
            total += count
        span.set_attribute("streamfix.repairs.total", total)
        if status >= 500:  # a server span's error: 4xx are the client's (OTel HTTP semconv)
            span.set_status(self._trace.StatusCode.ERROR)
        span.end()

    def _end_call(
        self, call: Span, record: ExchangeRecord, upstream_status: int | None, status: int
    ) -> None:
        """The upstream call's span, with what the answer said. An error (the conventions'
        `error.type`) when the upstream answered 4xx/5xx (its status), never answered (the
        proxy's status for it), or broke off or reported an error inside its stream."""
        if call.is_recording():
            call.set_attributes(answer_attributes(record.tally.answer))
            error = _call_error(record, upstream_status, status)
            if error is not None:
                call.set_attribute("error.type", error)
                call.set_status(self._trace.StatusCode.ERROR)
        call.end()

    def shutdown(self) -> None:
        """Flush and stop the provider built from the environment (a test's is its own)."""
        if self._owned is not None:
            self._owned.shutdown()


def _provider_from_environ(environ: Mapping[str, str]) -> SdkTracerProvider:
    """An SDK provider with a batching processor and the configured exporter. The SDK reads
    the rest itself (service name, resource attributes, sampler, endpoint, headers)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = _exporter(environ)
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "streamfix"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporter(environ: Mapping[str, str]) -> Any:
    """The exporter OTEL_TRACES_EXPORTER names (the first, "otlp" unless set), found among
    the installed packages' entry points as the SDK's own auto-configuration finds it."""
    from importlib.metadata import entry_points

    import opentelemetry.sdk.trace  # noqa: F401 (an ImportError here: the extra is missing)

    name = environ.get("OTEL_TRACES_EXPORTER", "").split(",")[0].strip().lower() or "otlp"
    if name == "otlp":
        protocol = (
            environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        ).strip()
        name = _OTLP_BY_PROTOCOL.get(protocol, name)
    found = entry_points(group=_EXPORTER_GROUP, name=name)
    if not found:
        raise LookupError(f"no exporter {name!r} installed (streamfix[otel] has otlp over HTTP)")
    return next(iter(found)).load()()


def _request_attributes(record: ExchangeRecord, method: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "streamfix.route": record.route,
        "streamfix.request_id": record.request_id,
        "streamfix.profile": record.profile,
    }
    model = record.model
    if isinstance(model, str):
        attributes["gen_ai.request.model"] = model
    if record.door and record.forwarded is not None:
        attributes["streamfix.front"] = record.door
    if method:
        attributes["http.request.method"] = method
    return attributes


def _call_error(record: ExchangeRecord, upstream_status: int | None, status: int) -> str | None:
    if upstream_status is None:
        return str(status)  # no answer came: the proxy's own status for that (502, 504)
    if upstream_status >= 400:
        return str(upstream_status)
    repairs = record.tally.repairs
    return next((kind for kind in _CALL_ERRORS if repairs.get(kind)), None)


def _header_map(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The client's trace-context fields as the propagator's carrier (the first of each)."""
    carrier: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        if key in TRACE_HEADERS:
            carrier.setdefault(key.decode(), value.decode("latin-1"))
    return carrier


def _wall_ns(started: float) -> int:
    """A monotonic start (`ExchangeRecord.started`) as the epoch nanoseconds a span starts at, so
    the span's duration is the one the log line and the metrics give."""
    return time.time_ns() - int((time.monotonic() - started) * 1e9)
