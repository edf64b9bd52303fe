"""A client that goes away mid-stream, over real sockets: the proxy closes the upstream and leaves
nothing behind (no task, no connection, no pending callback on its loop).

Every test runs the real proxy under uvicorn on loopback. Each test says in a comment what would
break without the behaviour it checks.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.support.chat_requests import CLIENT_TIMEOUT, chat
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import OnLoop, serving_in_thread
from tests.support.waiting import wait_until

KEEPALIVE = b": keepalive\n\n"

MODEL = "openai_text_usage_only_last_chunk"
DOORS = {
    # door: (path, streamed request body, how its stream opens, its heartbeat)
    "chat": ("/v1/chat/completions", chat(MODEL, stream=True), b"data: ", KEEPALIVE),
    "responses": (
        "/v1/responses",
        {"model": MODEL, "input": "hi", "stream": True},
        b"event: response.created",
        b"event: response.in_progress",
    ),
    "messages": (
        "/v1/messages",
        {
            "model": MODEL,
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
        b"event: message_start",
        b"event: ping",
    ),
}


@pytest.mark.parametrize("door", sorted(DOORS))
@pytest.mark.parametrize(
    ("knobs", "keepalive"),
    [
        ({"stall_after": 2}, 0.0),
        ({"delay": 0.25}, 0.0),
        ({"stall_after": 2}, 0.1),
    ],
    ids=["upstream-stalled", "upstream-still-sending", "upstream-stalled-keepalives-flowing"],
)
def test_client_disconnect_closes_the_upstream_and_leaves_nothing_behind(
    knobs: dict[str, Any], keepalive: float, door: str
) -> None:
    # Without the close in the stream's `finally`, the fake keeps `open_streams == 1` (stalled:
    # until the 600 s read timeout; still sending: until its last event, ~3 s) and the proxy
    # keeps the request task and the upstream connection; without `active_streams.dec()` the
    # gauge stays at 1. With keepalives flowing during the stall, a keepalive timer or comment
    # task left behind would show in the task count, and a stream kept alive by its own
    # comments in `open_streams`.
    # Every door: the Responses and Messages fronts' streams end the upstream request the same.
    path, request, opening, heartbeat = DOORS[door]
    fake = FakeUpstream(**knobs)
    settings = Settings().with_values(
        {
            "upstream.base_url": "http://unused",
            "repairs.strict": True,
            "server.keepalive_seconds": keepalive,
        }
    )
    with serving_in_thread(fake.app) as upstream:
        settings = settings.with_values({"upstream.base_url": f"{upstream.url}/v1"})
        probe = OnLoop(create_app(settings))
        with serving_in_thread(probe) as proxy:
            proxy_state = proxy.server.server_state
            upstream_state = upstream.server.server_state
            assert httpx.get(f"{proxy.url}/healthz").status_code == 200
            wait_until(
                lambda: not proxy_state.connections, "health check connection closed", timeout=1
            )
            baseline = probe.task_count()

            client = httpx.Client(timeout=CLIENT_TIMEOUT)
            with client.stream("POST", f"{proxy.url}{path}", json=request) as response:
                assert response.status_code == 200
                # Keep the iterator: dropping a half-read httpx iterator closes the connection.
                body = response.iter_raw()
                first = next(body)
                assert first.startswith(opening)
                if keepalive:  # the upstream's two events, then its silence: the proxy's
                    later = b""  # heartbeat, before the read timeout
                    for _ in range(8):
                        later += next(body)
                        if heartbeat in later:
                            break
                    assert heartbeat in later, later
                assert fake.open_streams == 1
                assert len(upstream_state.connections) == 1
                assert probe.task_count() > baseline  # the request is in flight
                body.close()  # mid-stream: the response was not read to its end
            client.close()

            took = wait_until(lambda: fake.open_streams == 0, "upstream stream closed", timeout=1.0)
            assert took < 1.0
            wait_until(
                lambda: not upstream_state.connections, "upstream connection closed", timeout=1
            )
            wait_until(lambda: not proxy_state.connections, "client connection closed", timeout=1)
            wait_until(lambda: not proxy_state.tasks, "proxy request tasks finished", timeout=1)
            wait_until(
                lambda: probe.task_count() <= baseline, "proxy tasks back to baseline", timeout=1
            )
            assert probe.task_count() == baseline
            metrics = httpx.get(f"{proxy.url}/metrics").text
            assert "streamfix_active_streams 0.0" in metrics
