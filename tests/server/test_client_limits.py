"""Slow and idle clients cannot pin the proxy: header, keep-alive and body timeouts, the body budget
and the connection cap.

Over real sockets on 127.0.0.1, against uvicorn running the proxy with the options and protocol
`streamfix serve` uses (`proxy.server.serving.uvicorn_config`), with short limits:

- a connection that sends nothing is closed after `server.header_timeout_seconds`; a head
  dripped a byte at a time gets 408 and is closed, on a fresh connection as on a kept-alive
  one; a head past `server.max_header_bytes` gets 431;
- a body that stalls (`server.body_timeout_seconds`) or drips past
  `server.body_total_timeout_seconds` gets 408, and the upstream never sees the request;
- the rest of a body the proxy answered without reading must still come in time;
- bodies being received share `server.max_buffered_request_bytes`: past it 503, and every
  exit of `read_body` (body, error, disconnect, cancel) gives its bytes back;
- `server.max_connections` holds: one more connection gets 503 and is closed;
- a response that outlasts all of these timeouts is not cut: they time the client's request.

Two more run `python -m proxy serve` as a process, once with two workers, to show the serve
command (and uvicorn's pickled Config in its workers) uses the same protocol.

Every wait is bounded; sockets are closed in `finally` blocks.
"""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.requests import ClientDisconnect, Request

from proxy.server.app import create_app
from proxy.server.body_limits import BodyBudget
from proxy.server.chat_request import read_body
from proxy.server.errors import ClientError
from proxy.server.serving import uvicorn_config
from proxy.settings.schema import ConfigError, Settings
from tests.support.fake_upstream import FakeUpstream, running_fake_upstream
from tests.support.proxy_process import chat, serving, write_config
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.servers import Served, free_port, serving_config_in_thread
from tests.support.waiting import wait_until

SHORT = 0.5  # seconds: the header and body timeouts of these tests
WAIT = 5.0  # seconds: the longest any socket read here waits
CHAT = b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
SLOW_MODEL = "gemini_indexless_fragmented_single"  # five events; with delay 0.5 s, ~2.5 s


# ── a proxy served like `streamfix serve` ────────────────────────────────────


@contextmanager
def limited_proxy(upstream: str, **values: Any) -> Iterator[Served]:
    """The proxy in front of `upstream` under `uvicorn_config`, with the given config values."""
    settings = Settings().with_values(
        {
            "upstream.base_url": upstream,
            "server.port": free_port(),
            "server.header_timeout_seconds": SHORT,
            "server.body_timeout_seconds": SHORT,
            **values,
        }
    )
    app = create_app(settings)
    with serving_config_in_thread(uvicorn_config(app, settings.server, "warning")) as served:
        yield served


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    with running_fake_upstream() as (fake, root):
        yield fake, f"{root}/v1"


def held(served: Served) -> int:
    """Bytes the proxy app's body budget counts."""
    budget: BodyBudget = served.server.config.loaded_app.state.proxy.body_budget
    return budget.held


def connect(served: Served) -> socket.socket:
    port = int(served.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    return sock


def read_until_closed(sock: socket.socket, timeout: float = WAIT) -> bytes:
    """Everything the proxy sends until it closes the connection; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    received = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data
    pytest.fail(f"the proxy kept the connection open for {timeout}s; got {received[:200]!r}")


def read_response(sock: socket.socket) -> bytes:
    """One whole response with a content-length, the connection left open."""
    sock.settimeout(WAIT)
    received = b""
    while b"\r\n\r\n" not in received:
        data = sock.recv(65536)
        assert data, received
        received += data
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        data = sock.recv(65536)
        assert data, received
        body += data
    return head + b"\r\n\r\n" + body


def is_closed_or_answered(sock: socket.socket) -> bool:
    """The proxy wrote something or closed (non-blocking)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def drip(sock: socket.socket, data: bytes, every: float, limit: float) -> float:
    """Send `data` a byte per `every` seconds until the proxy answers or closes; return when."""
    started = time.monotonic()
    for byte in data:
        if is_closed_or_answered(sock):
            return time.monotonic() - started
        if time.monotonic() - started > limit:
            pytest.fail(f"the proxy still read the drip after {limit}s")
        try:
            sock.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
        time.sleep(every)
    pytest.fail("the whole drip went through")


def status_and_error(response: bytes) -> tuple[int, dict[str, Any], bytes]:
    """The status, the OpenAI `error` object and the head of one HTTP response."""
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, orjson.loads(body)["error"], head.lower()


def chat_body(model: str = "openai_indexed_fragmented", *, stream: bool = False) -> bytes:
    return orjson.dumps(chat(model, stream=stream))


# ── the request head ─────────────────────────────────────────────────────────


def test_an_idle_connection_is_closed_after_the_header_timeout(upstream: tuple) -> None:
    _, url = upstream
    with limited_proxy(url) as proxy:
        sock = connect(proxy)
        try:
            started = time.monotonic()
            assert read_until_closed(sock) == b""  # nothing asked, so nothing answered
            assert SHORT * 0.8 < time.monotonic() - started < SHORT + 1.5
        finally:
            sock.close()
        wait_until(lambda: not proxy.server.server_state.connections, "no open connections")


def test_a_slowloris_head_gets_408_and_is_closed(upstream: tuple) -> None:
    fake, url = upstream
    with limited_proxy(url) as proxy:
        sock = connect(proxy)
        try:
            endless = CHAT + b"".join(b"x-pad-%d: y\r\n" % n for n in range(1000))
            took = drip(sock, endless, every=0.1, limit=SHORT + 2)
            assert took < SHORT + 1.5
            status, error, head = status_and_error(read_until_closed(sock))
        finally:
            sock.close()
    assert status == 408
    assert error["code"] == "request_timeout"
    assert b"connection: close" in head
    assert fake.requests == []


def test_a_later_head_on_a_kept_alive_connection_is_timed_too(upstream: tuple) -> None:
    _, url = upstream
    with limited_proxy(url) as proxy:
        sock = connect(proxy)
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: proxy\r\n\r\n")
            first = read_response(sock)
            assert first.startswith(b"HTTP/1.1 200"), first
            took = drip(sock, b"GET /healthz HTTP/1.1\r\n" + b"x" * 1000, 0.1, SHORT + 2)
            assert took < SHORT + 1.5
            status, error, _ = status_and_error(read_until_closed(sock))
        finally:
            sock.close()
    assert (status, error["code"]) == (408, "request_timeout")


def test_an_idle_kept_alive_connection_closes_after_the_keepalive_timeout(
    upstream: tuple,
) -> None:
    _, url = upstream
    values = {"server.keepalive_timeout_seconds": SHORT, "server.header_timeout_seconds": 10.0}
    with limited_proxy(url, **values) as proxy:
        sock = connect(proxy)
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: proxy\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            assert read_until_closed(sock, timeout=SHORT + 1.5) == b""
            assert time.monotonic() - started > SHORT * 0.8
        finally:
            sock.close()


def test_a_head_past_max_header_bytes_gets_431(upstream: tuple) -> None:
    fake, url = upstream
    with limited_proxy(url, **{"server.max_header_bytes": 4096}) as proxy:
        sock = connect(proxy)
        try:
            sock.sendall(CHAT + b"x-big: " + b"y" * 20_000)  # never finished, sent at once
            status, error, head = status_and_error(read_until_closed(sock, timeout=SHORT * 0.8))
        finally:
            sock.close()
        # A head just under the cap is served as usual.
        padded = httpx.get(f"{proxy.url}/healthz", headers={"x-pad": "y" * 3000}, timeout=WAIT)
        assert padded.status_code == 200
    assert (status, error["code"]) == (431, "request_header_too_large")
    assert b"connection: close" in head
    assert fake.requests == []


# ── the request body ─────────────────────────────────────────────────────────


def test_a_stalled_body_gets_408_and_never_goes_upstream(upstream: tuple) -> None:
    fake, url = upstream
    body = chat_body()
    with limited_proxy(url) as proxy:
        sock = connect(proxy)
        try:
            sock.sendall(CHAT + b"content-length: %d\r\n\r\n" % len(body) + body[:10])
            started = time.monotonic()
            status, error, head = status_and_error(read_until_closed(sock))
            assert time.monotonic() - started < SHORT + 1.5
        finally:
            sock.close()
        wait_until(lambda: held(proxy) == 0, "the stalled body's bytes given back")
        # The proxy still serves, and the upstream got only this one request.
        ok = httpx.post(f"{proxy.url}/v1/chat/completions", content=body, timeout=WAIT)
        assert ok.status_code == 200, ok.text
    assert status == 408
    assert error["code"] == "request_timeout"
    assert "no request body bytes" in error["message"]
    assert b"connection: close" in head
    assert len(fake.requests) == 1


def test_a_dripping_body_hits_the_whole_body_deadline(upstream: tuple) -> None:
    # A byte every 0.1 s never pauses for the 0.5 s body timeout; the 1.2 s deadline for the
    # whole body still ends it.
    fake, url = upstream
    body = chat_body()
    with limited_proxy(url, **{"server.body_total_timeout_seconds": 1.2}) as proxy:
        sock = connect(proxy)
        try:
            sock.sendall(CHAT + b"content-length: %d\r\n\r\n" % len(body))
            took = drip(sock, body, every=0.1, limit=4)
            assert 1.0 < took < 3
            status, error, _ = status_and_error(read_until_closed(sock))
        finally:
            sock.close()
    assert (status, error["code"]) == (408, "request_timeout")
    assert "not complete after 1.2 s" in error["message"]
    assert fake.requests == []


def test_the_unread_rest_of_an_answered_body_must_arrive_in_time(upstream: tuple) -> None:
    # /healthz answers a POST with 405 without reading its body. Each dripped byte would cancel
    # uvicorn's keep-alive timer, so without the drain deadline the drip holds the connection.
    _, url = upstream
    with limited_proxy(url, **{"server.keepalive_timeout_seconds": 5.0}) as proxy:
        sock = connect(proxy)
        try:
            sock.sendall(b"POST /healthz HTTP/1.1\r\nhost: p\r\ncontent-length: 100000\r\n\r\nx")
            answer = read_response(sock)
            assert answer.startswith(b"HTTP/1.1 405"), answer
            took = drip(sock, b"x" * 1000, every=0.1, limit=SHORT + 2)
            assert took < SHORT + 1.5
        finally:
            sock.close()


def test_past_the_body_budget_503_and_the_budget_is_given_back(upstream: tuple) -> None:
    fake, url = upstream
    budget = 1_000_000
    values = {"server.max_buffered_request_bytes": budget, "server.body_timeout_seconds": 10.0}
    with limited_proxy(url, **values) as proxy, ExitStack() as sockets:
        # An unfinished upload holding 700 kB of the 1 MB budget.
        holder = sockets.enter_context(connect(proxy))
        holder.sendall(CHAT + b"content-length: 800000\r\n\r\n" + b"x" * 700_000)
        wait_until(lambda: held(proxy) == 700_000, "the upload counted")

        # A declared body that cannot fit is refused before it is sent.
        declared = sockets.enter_context(connect(proxy))
        declared.sendall(CHAT + b"content-length: 400000\r\n\r\n")
        status, error, head = status_and_error(read_until_closed(declared))
        assert (status, error["code"], error["type"]) == (503, "server_busy", "server_error")
        assert b"retry-after: 1" in head and b"connection: close" in head

        # A chunked body (no length up front) is refused at the piece that passes the budget.
        chunked = sockets.enter_context(connect(proxy))
        # Its last piece is the one that passes: everything sent has been read when the proxy
        # answers, so it closes cleanly (unread bytes would make the close a reset).
        chunked.sendall(CHAT + b"transfer-encoding: chunked\r\n\r\n")
        for piece in (b"y" * 100_000, b"y" * 100_000, b"y" * 100_000, b"y" * 1000):
            chunked.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        status, error, _ = status_and_error(read_until_closed(chunked))
        assert (status, error["code"]) == (503, "server_busy")
        assert held(proxy) == 700_000  # the refused pieces were not kept

        # The holder leaves: its bytes are given back, and a normal request goes through.
        holder.close()
        wait_until(lambda: held(proxy) == 0, "the departed upload given back")
        body = chat_body()
        ok = httpx.post(f"{proxy.url}/v1/chat/completions", content=body, timeout=WAIT)
        assert ok.status_code == 200, ok.text
        assert held(proxy) == 0
    assert len(fake.requests) == 1


def _request(receive: Callable[[], Any], length: int | None = None) -> Request:
    headers = [(b"content-length", str(length).encode())] if length is not None else []
    return Request({"type": "http", "headers": headers}, receive)


@pytest.mark.parametrize("exit_by", ["body", "too_large", "over_budget", "disconnect", "cancel"])
async def test_the_budget_is_given_back_on_every_exit(exit_by: str) -> None:
    settings = Settings().with_values(
        {"server.max_request_bytes": 1000, "server.max_buffered_request_bytes": 2000}
    )
    pieces = {
        "body": [b"a" * 600, b"b" * 300],
        "too_large": [b"a" * 600, b"b" * 600],
        "over_budget": [b"a" * 600, b"b" * 300],
        "disconnect": [b"a" * 600],
        "cancel": [b"a" * 600],
    }[exit_by]
    # Another body holding 1200 bytes makes the second piece of "over_budget" not fit.
    other = 1200 if exit_by == "over_budget" else 0
    budget = BodyBudget()
    budget.take(other, 2000)
    arrived = asyncio.Event()
    gone = asyncio.Event()
    counted: list[int] = []  # what the budget held at each receive

    async def receive() -> dict[str, Any]:
        counted.append(budget.held)
        if pieces:
            piece = pieces.pop(0)
            if not pieces:
                arrived.set()
            more = bool(pieces) or exit_by in ("disconnect", "cancel")
            return {"type": "http.request", "body": piece, "more_body": more}
        if exit_by == "disconnect":
            return {"type": "http.disconnect"}
        await gone.wait()  # "cancel": the client is silent until the task is cancelled
        raise AssertionError("not reached")

    task = asyncio.create_task(read_body(_request(receive), settings.server, budget))
    await asyncio.wait_for(arrived.wait(), WAIT)
    await asyncio.sleep(0)
    if exit_by == "cancel":
        assert budget.held == other + 600  # counted while it waits
        task.cancel()
    done, _ = await asyncio.wait([task], timeout=WAIT)
    assert done
    outcome = {
        "body": lambda: task.result() == b"a" * 600 + b"b" * 300,
        "too_large": lambda: (
            isinstance(task.exception(), ClientError) and task.exception().status == 413
        ),
        "over_budget": lambda: (
            isinstance(task.exception(), ClientError) and task.exception().status == 503
        ),
        "disconnect": lambda: isinstance(task.exception(), ClientDisconnect),
        "cancel": task.cancelled,
    }[exit_by]
    assert outcome()
    assert max(counted) == other + 600  # the first piece was counted while the read went on
    assert budget.held == other  # and given back, however the read ended


async def test_a_body_whose_pieces_keep_coming_within_the_pause_is_read_whole() -> None:
    """The pause deadline moves with each piece (BodyDeadline re-arms its one timer)."""
    settings = Settings().with_values(
        {"server.body_timeout_seconds": 0.2, "server.body_total_timeout_seconds": 5}
    )
    pieces = [b"a", b"b", b"c", b"d", b"e"]

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.12)  # each within the pause, all together well past it
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    assert await read_body(_request(receive), settings.server, BodyBudget()) == b"abcde"


async def test_a_cancellation_from_outside_is_not_taken_for_a_body_timeout() -> None:
    settings = Settings().with_values({"server.body_timeout_seconds": 0.05})
    waiting = asyncio.Event()

    async def receive() -> dict[str, Any]:
        waiting.set()
        await asyncio.sleep(0.2)  # past the pause: the deadline fires too
        raise AssertionError("not reached")

    task = asyncio.create_task(read_body(_request(receive), settings.server, BodyBudget()))
    await waiting.wait()
    task.cancel()  # a shutdown, before the deadline
    await asyncio.sleep(0.1)
    assert task.cancelled()


# ── connections ──────────────────────────────────────────────────────────────


def test_the_connection_cap_holds(upstream: tuple) -> None:
    _, url = upstream
    cap = 5
    values = {"server.max_connections": cap, "server.header_timeout_seconds": 10.0}
    with limited_proxy(url, **values) as proxy, ExitStack() as sockets:
        idle = [sockets.enter_context(connect(proxy)) for _ in range(cap)]
        connections = proxy.server.server_state.connections
        wait_until(lambda: len(connections) == cap, f"{cap} open connections")

        for _ in range(3):
            extra = sockets.enter_context(connect(proxy))
            status, error, head = status_and_error(read_until_closed(extra))
            assert (status, error["code"]) == (503, "too_many_connections")
            assert b"connection: close" in head
            wait_until(lambda: len(connections) <= cap, "the refused connection gone")

        # The idle ones were not disturbed; once one leaves, a request gets its place.
        assert not any(is_closed_or_answered(sock) for sock in idle)
        idle[0].close()
        wait_until(lambda: len(connections) == cap - 1, "a place freed")
        assert httpx.get(f"{proxy.url}/healthz", timeout=WAIT).status_code == 200


def test_a_response_outlasting_every_client_timeout_is_not_cut() -> None:
    # The stream takes ~2.5 s; the head, body and keep-alive timeouts are 0.5 s and the whole
    # body deadline 1 s. On the same connection, a second request is served after it.
    values = {"server.body_total_timeout_seconds": 1.0, "server.keepalive_timeout_seconds": SHORT}
    with (
        running_fake_upstream(delay=0.5) as (fake, root),
        limited_proxy(f"{root}/v1", **values) as proxy,
        httpx.Client(base_url=proxy.url, timeout=WAIT) as client,
    ):
        started = time.monotonic()
        with client.stream("POST", "/v1/chat/completions", json=chat(SLOW_MODEL)) as response:
            body = b"".join(response.iter_bytes())
        took = time.monotonic() - started
        again = client.get("/healthz")
    assert response.status_code == 200
    assert took > 2.0
    assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
    assert b'"error"' not in body
    assert again.status_code == 200
    assert len(fake.requests) == 1


def test_non_positive_limits_are_refused() -> None:
    for key in (
        "header_timeout_seconds",
        "max_header_bytes",
        "body_timeout_seconds",
        "body_total_timeout_seconds",
        "max_buffered_request_bytes",
        "max_connections",
        "keepalive_timeout_seconds",
    ):
        with pytest.raises(ConfigError, match=f"server.{key}: must be positive"):
            Settings().with_values({f"server.{key}": 0})
    settings = Settings().with_values({"server.header_timeout_seconds": "2.5"})  # from the env
    assert settings.server.header_timeout_seconds == 2.5


# ── `python -m proxy serve` ──────────────────────────────────────────────────


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


@pytest.mark.parametrize("workers", [1, 2])
def test_streamfix_serve_closes_idle_connections(
    tmp_path: Path, workers: int, request: pytest.FixtureRequest
) -> None:
    text = f"[server]\nheader_timeout_seconds = {SHORT}\nworkers = {workers}\n"
    if workers > 1:  # several workers need a shared store
        text += f'[signatures]\nstore = "{request.getfixturevalue("redis_server").url}"\n'
    config = write_config(tmp_path, text)
    with serving("--config", config, "--upstream", "http://127.0.0.1:9/v1") as proxy:
        if workers > 1:
            proxy.wait_for_log("Application startup complete.", count=workers)
        port = int(proxy.url.rsplit(":", 1)[1])
        socks = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(4)]
        try:
            started = time.monotonic()
            for sock in socks:
                assert read_until_closed(sock) == b""
            assert time.monotonic() - started < SHORT + 1.5
        finally:
            for sock in socks:
                sock.close()
