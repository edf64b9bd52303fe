"""`POST /v1/chat/completions` skips Starlette's router and middlewares (proxy/server/asgi.py): it
must still answer like the rest of the proxy, bugs of ours included, and leave other paths alone."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from proxy.repair.tally import Tally
from proxy.server.app import create_app
from proxy.server.delivery import relay
from proxy.server.record import ExchangeRecord
from proxy.settings.schema import Settings
from tests.support.servers import serve_in_thread, serving_in_thread
from tests.support.waiting import wait_until

SSE = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
BODY = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


class BrokenOnceTransport(httpx.AsyncBaseTransport):
    """Raises what no handler expects (not an httpx error) on its first request."""

    def __init__(self) -> None:
        self.sent = 0
        self.methods: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        self.methods.append(request.method)
        if self.sent == 1:
            raise RuntimeError("a bug in the proxy")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=SSE)


def served(transport: httpx.AsyncBaseTransport):
    settings = Settings().with_values({"upstream.base_url": "http://127.0.0.1:9/v1"})
    return serve_in_thread(create_app(settings, transport=transport))


def test_an_unexpected_error_is_a_500_in_openais_format_and_the_proxy_goes_on(caplog) -> None:
    transport = BrokenOnceTransport()
    with served(transport) as url:
        with caplog.at_level("ERROR", logger="proxy.server.asgi"):
            failed = httpx.post(f"{url}/v1/chat/completions", json={**BODY, "stream": True})
        after = httpx.post(f"{url}/v1/chat/completions", json={**BODY, "stream": True})
    assert failed.status_code == 500
    assert failed.json() == {
        "error": {
            "message": "streamfix failed to handle the request",
            "type": "server_error",
            "code": "internal_error",
        }
    }
    assert "a bug in the proxy" in caplog.text
    assert after.status_code == 200
    assert after.content.endswith(b"data: [DONE]\n\n")


def test_other_methods_and_paths_still_go_through_starlette() -> None:
    transport = BrokenOnceTransport()
    transport.sent = 1  # no failure
    with served(transport) as url:
        health = httpx.get(f"{url}/healthz")
        listed = httpx.get(f"{url}/v1/chat/completions")  # not the hot route: passed through
    assert health.json() == {"status": "ok"}
    assert listed.status_code == 200
    assert transport.methods == ["GET"]


def test_a_client_leaving_mid_upload_is_not_an_error(caplog) -> None:
    """A body cut off by the client's disconnect: nobody is left to answer, so no 500 and no
    "unexpected error" in the log, and nothing goes upstream."""
    transport = BrokenOnceTransport()
    transport.sent = 1
    settings = Settings().with_values({"upstream.base_url": "http://127.0.0.1:9/v1"})
    with serving_in_thread(create_app(settings, transport=transport)) as proxy:
        url, state = proxy.url, proxy.server.server_state
        port = int(url.rsplit(":", 1)[1])
        with caplog.at_level("ERROR"):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                    b'content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"model":'
                )
                wait_until(lambda: state.tasks, "the request under way")
            wait_until(lambda: not state.tasks and not state.connections, "the request ended")
            after = httpx.post(f"{url}/v1/chat/completions", json={**BODY, "stream": True})
    assert after.status_code == 200
    assert transport.methods == ["POST"]  # only the second request went upstream
    assert "unexpected error" not in caplog.text
    assert "Exception in ASGI application" not in caplog.text


async def test_a_stream_ended_before_its_first_byte_still_closes_the_upstream_and_is_booked():
    """A shutdown's cancellation can land while the response head is being written (a client
    whose socket buffer is full): the body never started, yet the upstream response must be
    closed and the exchange logged and counted."""
    closed: list[str] = []
    booked: list[bool] = []

    class UpstreamBody(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b'data: {"choices":[]}\n\n'

        async def aclose(self) -> None:
            closed.append("upstream")

    upstream = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=UpstreamBody()
    )
    response = relay(upstream, ExchangeRecord(Tally("test")), [], lambda: booked.append(True))

    async def send(message) -> None:
        if message["type"] == "http.response.start":
            raise asyncio.CancelledError  # where a shutdown's cancellation lands

    async def receive():
        await asyncio.Event().wait()  # the client never leaves

    with pytest.raises(asyncio.CancelledError):
        await response({"type": "http"}, receive, send)
    assert booked == [True]
    assert closed == ["upstream"]
