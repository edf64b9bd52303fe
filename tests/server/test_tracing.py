"""OpenTelemetry spans per exchange, over real sockets: the SDK's in-memory exporter catches
them; off (no OTEL_*), nothing of opentelemetry loads and trace headers cross untouched. The
upstream call's GenAI span is tested in test_gen_ai_spans.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.server.app import create_app
from proxy.server.tracing import Tracing, wanted
from proxy.settings.schema import Settings
from tests.support.fake_upstream import running_fake_upstream
from tests.support.metrics import metric
from tests.support.servers import serve_in_thread
from tests.support.tracing import exchange_spans, finished_spans, in_memory_exporter, traced_proxy

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"
TRACESTATE = "congo=t61rcWkgMzE"


def chat(model: str, **extra: Any) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


@pytest.fixture
def exporter() -> Any:
    return in_memory_exporter()


def test_a_repaired_gemini_stream_is_one_exchange_span_with_its_repairs(exporter: Any) -> None:
    with traced_proxy(exporter) as (_, proxy):
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("gemini_empty_id", stream=True),
            headers={"authorization": "Bearer sk-secret-credential"},
        )
        assert response.status_code == 200
        span, _ = exchange_spans(exporter)
        metrics = httpx.get(f"{proxy}/metrics").text
    from opentelemetry.trace import SpanKind, StatusCode

    assert span.name == "streamfix chat"
    assert span.kind is SpanKind.SERVER
    assert span.status.status_code is StatusCode.UNSET
    attributes = dict(span.attributes)
    assert attributes["streamfix.route"] == "default"
    assert attributes["gen_ai.request.model"] == "gemini_empty_id"
    assert attributes["http.response.status_code"] == 200
    assert attributes["http.request.method"] == "POST"
    assert isinstance(attributes["streamfix.profile"], str)
    assert 0 < attributes["streamfix.upstream.ttfb_s"] <= attributes["streamfix.duration_s"]
    assert span.end_time - span.start_time == pytest.approx(
        attributes["streamfix.duration_s"] * 1e9, abs=5e6
    )
    events = {event.name: event.attributes["count"] for event in span.events}
    # The call's empty id replaced, its thought signature kept: one event each.
    assert events == {
        "tool_call_id_generated": 1,
        "tool_call_index_added": 1,
        "finish_reason_rewritten": 1,
        "role_repeated_dropped": 1,
        "signatures_captured": 1,
    }
    for kind, count in events.items():
        assert metric(metrics, "streamfix_repairs_total", kind=kind, route="default") == count
        assert attributes[f"streamfix.repairs.{kind}"] == count
    assert attributes["streamfix.repairs.total"] == sum(events.values())
    # No credential and no prompt or response text in what is exported.
    exported = json.dumps([attributes, [dict(e.attributes) for e in span.events]])
    assert "sk-secret-credential" not in exported
    assert '"go"' not in exported


@pytest.mark.parametrize(
    ("model", "status", "error"),
    [
        ("gemini_indexless_call_stop", 200, False),
        ("error_openai_401", 401, False),
        ("error_openai_500", 500, True),
    ],
)
def test_non_streamed_exchanges_and_upstream_errors(
    exporter: Any, model: str, status: int, error: bool
) -> None:
    from opentelemetry.trace import StatusCode

    with traced_proxy(exporter) as (_, proxy):
        response = httpx.post(f"{proxy}/v1/chat/completions", json=chat(model))
        assert response.status_code == status
        span, call = exchange_spans(exporter)
    assert span.name == "streamfix chat"
    assert span.attributes["http.response.status_code"] == status
    assert span.attributes["gen_ai.request.model"] == model
    assert "streamfix.upstream.ttfb_s" in span.attributes
    # A server span is an error for 5xx only: a 4xx is the client's (OTel HTTP conventions).
    expected = StatusCode.ERROR if error else StatusCode.UNSET
    assert span.status.status_code is expected
    # The upstream call's span is an error for any 4xx/5xx the upstream answered (a client
    # span's error, OTel HTTP conventions), named by the status.
    assert call.attributes["http.response.status_code"] == status
    if status >= 400:
        assert call.status.status_code is StatusCode.ERROR
        assert call.attributes["error.type"] == str(status)
    else:
        assert call.status.status_code is StatusCode.UNSET
        assert "error.type" not in call.attributes


def test_refused_requests_and_passthrough_get_spans(exporter: Any) -> None:
    with traced_proxy(exporter) as (fake, proxy):
        refused = httpx.post(
            f"{proxy}/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert refused.status_code == 400
        models = httpx.get(f"{proxy}/v1/models", headers={"traceparent": TRACEPARENT})
        assert models.status_code == 200
        spans = finished_spans(exporter, 2)
    by_name = {span.name: span for span in spans}
    assert by_name["streamfix refused"].attributes["http.response.status_code"] == 400
    assert by_name["streamfix refused"].attributes["streamfix.route"] == "-"
    passthrough = by_name["streamfix passthrough"]
    assert passthrough.attributes["http.response.status_code"] == 200
    assert passthrough.attributes["http.request.method"] == "GET"
    assert passthrough.context.trace_id == int(TRACE_ID, 16)
    sent = fake.requests[-1].headers["traceparent"]
    assert sent == f"00-{TRACE_ID}-{passthrough.context.span_id:016x}-01"


def test_the_clients_trace_is_continued_and_sent_upstream(exporter: Any) -> None:
    with traced_proxy(exporter) as (fake, proxy):
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("gemini_indexless_call_stop", stream=True),
            headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE},
        )
        assert response.status_code == 200
        span, call = exchange_spans(exporter)
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert span.parent is not None and span.parent.span_id == int(CLIENT_SPAN_ID, 16)
    assert span.parent.is_remote
    headers = fake.requests[-1].headers
    # One traceparent, the proxy's upstream call's (the recorder joins repeated fields with
    # ", "): the upstream's own span is a child of the call that reached it.
    assert headers["traceparent"] == f"00-{TRACE_ID}-{call.context.span_id:016x}-01"
    assert headers["tracestate"] == TRACESTATE


def test_without_a_client_trace_the_proxy_starts_one(exporter: Any) -> None:
    with traced_proxy(exporter) as (fake, proxy):
        httpx.post(f"{proxy}/v1/chat/completions", json=chat("gemini_indexless_call_stop"))
        span, call = exchange_spans(exporter)
    assert span.parent is None
    trace_id, span_id = f"{span.context.trace_id:032x}", f"{call.context.span_id:016x}"
    # Flags: sampled, and (newer SDKs) W3C level 2's "random trace id" bit.
    sent = fake.requests[-1].headers["traceparent"]
    assert sent.startswith(f"00-{trace_id}-{span_id}-")
    assert int(sent.rsplit("-", 1)[1], 16) & 1
    assert "tracestate" not in fake.requests[-1].headers


OFF_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import httpx
    from proxy.server.app import create_app
    from proxy.settings.schema import Settings
    from tests.support.fake_upstream import running_fake_upstream
    from tests.support.servers import serve_in_thread

    with running_fake_upstream() as (fake, root):
        app = create_app(Settings().with_values({"upstream.base_url": f"{root}/v1"}))
        with serve_in_thread(app) as url:
            response = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "gemini_indexless_call_stop", "stream": True,
                      "messages": [{"role": "user", "content": "go"}]},
                headers={"traceparent": sys.argv[1], "tracestate": sys.argv[2]},
            )
            response.read()
    print(json.dumps({
        "status": response.status_code,
        "tracing": app.state.proxy.tracing is not None,
        "loaded": sorted(name for name in sys.modules if name.startswith("opentelemetry")),
        "traceparent": fake.requests[-1].headers.get("traceparent"),
        "tracestate": fake.requests[-1].headers.get("tracestate"),
    }))
    """
)


def test_off_nothing_loads_and_trace_headers_cross_unchanged() -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    # A traceparent the W3C parser would refuse (upper-case hex) still crosses as sent.
    odd = TRACEPARENT.upper()
    done = subprocess.run(
        [sys.executable, "-c", OFF_SCRIPT, odd, TRACESTATE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == 200
    assert seen["tracing"] is False
    assert seen["loaded"] == []
    assert seen["traceparent"] == odd
    assert seen["tracestate"] == TRACESTATE


def test_otel_set_but_not_installed_warns_once_and_proxies(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in [name for name in sys.modules if name.startswith("opentelemetry")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry: ImportError
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    caplog.set_level(logging.WARNING, logger="proxy.server.tracing")
    with running_fake_upstream() as (fake, root):
        app = create_app(Settings().with_values({"upstream.base_url": f"{root}/v1"}))
        with serve_in_thread(app) as url:
            response = httpx.post(
                f"{url}/v1/chat/completions",
                json=chat("gemini_indexless_call_stop"),
                headers={"traceparent": TRACEPARENT},
            )
    assert response.status_code == 200
    assert app.state.proxy.tracing is None
    warnings = [r for r in caplog.records if r.name == "proxy.server.tracing"]
    assert len(warnings) == 1
    assert "streamfix[otel]" in warnings[0].getMessage()
    assert fake.requests[-1].headers["traceparent"] == TRACEPARENT


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "streamfix"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_which_environment_turns_tracing_on(environ: dict[str, str], on: bool) -> None:
    assert wanted(environ) is on


def test_from_environ_builds_the_named_exporter_or_warns(caplog: pytest.LogCaptureFixture) -> None:
    assert Tracing.from_environ({}) is None
    console = Tracing.from_environ({"OTEL_TRACES_EXPORTER": "console"})
    assert console is not None
    console.shutdown()
    caplog.set_level(logging.WARNING, logger="proxy.server.tracing")
    assert Tracing.from_environ({"OTEL_TRACES_EXPORTER": "no-such-exporter"}) is None
    assert "no-such-exporter" in caplog.text
