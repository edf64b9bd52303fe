"""The Prometheus metrics (proxy/server/metrics.py), over real sockets: a repaired Gemini stream
is counted by kind.
"""

from __future__ import annotations

import httpx

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.support.fake_upstream import running_fake_upstream
from tests.support.metrics import metric
from tests.support.servers import serve_in_thread


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


def route(name: str, patterns: list[str], base_url: str, **extra) -> dict:
    return {"name": name, "models": patterns, "base_url": base_url, **extra}


def test_metrics_count_a_repaired_gemini_stream() -> None:
    settings_values = {"repairs.strict": True}
    with running_fake_upstream() as (_, root):
        settings = Settings().with_values({"upstream.base_url": f"{root}/v1", **settings_values})
        with serve_in_thread(create_app(settings)) as proxy:
            before = httpx.get(f"{proxy}/metrics").text
            response = httpx.post(
                f"{proxy}/v1/chat/completions",
                json=chat("gemini_empty_id", stream=True),
                headers={"authorization": "Bearer k"},
            )
            assert response.status_code == 200
            after = httpx.get(f"{proxy}/metrics").text
            ready = httpx.get(f"{proxy}/readyz")
    assert ready.status_code == 200 and ready.json()["store"] is True
    labels = {"route": "default", "status": "200"}
    assert (
        metric(after, "streamfix_requests_total", **labels)
        == metric(before, "streamfix_requests_total", **labels) + 1
    )
    assert (
        metric(after, "streamfix_repairs_total", kind="tool_call_id_generated", route="default")
        == 1
    )
    assert metric(after, "streamfix_signatures_total", event="captured") == 1
    # Every receipt kind is counted alike by kind (DeepSeek's reasoning_content was, Google's
    # signatures were not); Google's keep their by-event metric beside it.
    assert (
        metric(after, "streamfix_repairs_total", kind="signatures_captured", route="default") == 1
    )
    assert metric(after, "streamfix_active_streams") == 0
    assert metric(after, "streamfix_upstream_ttfb_seconds_count", route="default") == 1
    assert metric(after, "streamfix_upstream_duration_seconds_count", route="default") == 1
