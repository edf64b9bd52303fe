"""The real proxy with tracing into the OpenTelemetry SDK's in-memory exporter, and reading
the spans it finished."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proxy.server.app import create_app
from proxy.server.tracing import Tracing
from proxy.settings.schema import Settings
from tests.support.fake_upstream import FakeUpstream, running_fake_upstream
from tests.support.servers import serve_in_thread
from tests.support.waiting import wait_until


def in_memory_exporter() -> Any:
    # The test extra installs the SDK: a missing one is a failure here, never a skip.
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@contextmanager
def traced_proxy(exporter: Any) -> Iterator[tuple[FakeUpstream, str]]:
    """A fake upstream and the proxy in front of it, its spans going to `exporter`."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with running_fake_upstream() as (fake, root):
        settings = Settings().with_values(
            {"upstream.base_url": f"{root}/v1", "repairs.strict": True}
        )
        app = create_app(settings)
        app.state.proxy.tracing = Tracing(provider)
        with serve_in_thread(app) as url:
            yield fake, url


def finished_spans(exporter: Any, count: int) -> list[Any]:
    # A stream's span ends when the stream closes, just after the client read its last byte.
    wait_until(lambda: len(exporter.get_finished_spans()) >= count, f"{count} finished spans")
    spans = list(exporter.get_finished_spans())
    assert len(spans) == count
    return spans


def exchange_spans(exporter: Any) -> tuple[Any, Any]:
    """A chat exchange's two spans: the exchange's (SERVER) and its upstream call's (CLIENT),
    the second a child of the first."""
    from opentelemetry.trace import SpanKind

    spans = finished_spans(exporter, 2)
    (server,) = [span for span in spans if span.kind is SpanKind.SERVER]
    (call,) = [span for span in spans if span.kind is SpanKind.CLIENT]
    assert call.parent is not None and call.parent.span_id == server.context.span_id
    assert call.context.trace_id == server.context.trace_id
    return server, call
