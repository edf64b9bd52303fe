"""Faults, over real sockets: what the client sees when the client, the upstream or the input
misbehaves (issue 7, items 1 to 3).

Every test runs the real proxy under uvicorn on loopback. Upstreams that the transcript fake
cannot play (one that accepts and never answers, one that drops the connection mid-stream, a
non-SSE body on a stream request, a 20 MiB event) are `RawUpstream`s below: a bounded raw-TCP
server on 127.0.0.1 that sends exactly the bytes a test scripts. The only name that is not
127.0.0.1 is `streamfix-test.invalid`: the reserved `.invalid` TLD never resolves.

Each test says in a comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import asyncio
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest

from proxy.repair.conformance import stream_chunks, violations
from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.support.fake_upstream import FakeUpstream, running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.servers import free_port, serving_in_thread
from tests.support.waiting import wait_until

CLIENT_TIMEOUT = httpx.Timeout(10.0)


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == "upstream_error"
    assert error["code"] == code
    return error


# ── a raw upstream ───────────────────────────────────────────────────────────


@dataclass
class RawRequest:
    head: bytes
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Reply:
    """What a RawUpstream does with one request: wait `wait` seconds, send `pieces` (pausing
    `pause` seconds after each), then `end`: "close" (FIN), "reset" (RST) or "hang" (keep the
    connection open and silent until the test ends)."""

    pieces: Iterable[bytes] = ()
    end: str = "close"
    wait: float = 0.0
    pause: float = 0.0


def http_head(content_type: str | None = "text/event-stream", status: int = 200) -> bytes:
    """A response head with a chunked body (so a dropped connection is detectably incomplete)."""
    lines = [f"HTTP/1.1 {status} OK", "transfer-encoding: chunked", "connection: close"]
    if content_type:
        lines.append(f"content-type: {content_type}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def chunked(content_type: str | None, parts: Iterable[bytes]) -> list[bytes]:
    """A complete chunked response: head, one HTTP chunk per part, the last chunk."""
    return [http_head(content_type), *(http_chunk(p) for p in parts), LAST_CHUNK]


class RawUpstream:
    """A raw-TCP upstream on 127.0.0.1. For each connection: reads one request (head and a
    Content-Length body), records it, and plays `reply(request)`. Bounded: every socket has a
    timeout and hanging connections are released when the context exits."""

    def __init__(self, reply: Callable[[RawRequest], Reply]) -> None:
        self.reply = reply
        self.requests: list[RawRequest] = []
        self.sent: list[int] = []  # bytes sent, per finished connection
        self.stopping = threading.Event()
        upstream = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                upstream._handle(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> RawUpstream:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, sock: socket.socket) -> None:
        sock.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            received = sock.recv(65536)
            if not received:
                return
            data += received
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            received = sock.recv(65536)
            if not received:
                break
            body += received
        request = RawRequest(head, body)
        self.requests.append(request)
        reply = self.reply(request)
        self.stopping.wait(reply.wait)
        sent = 0
        try:
            for piece in reply.pieces:
                sock.sendall(piece)
                sent += len(piece)
                if reply.pause:
                    self.stopping.wait(reply.pause)
        except OSError:
            pass  # the proxy went away: what we measure in `sent`
        finally:
            self.sent.append(sent)
        if reply.end == "hang":
            self.stopping.wait(30)
        elif reply.end == "reset":
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        sock.close()


@contextmanager
def raw_upstream(reply: Callable[[RawRequest], Reply] | Reply) -> Iterator[RawUpstream]:
    with RawUpstream(reply if callable(reply) else lambda _: reply) as upstream:
        yield upstream


# ── 1. the client goes away mid-stream ───────────────────────────────────────


class LoopProbe:
    """ASGI wrapper that notes the event loop the app runs on (the proxy's uvicorn thread has
    its own), so a test can count that loop's tasks from the outside."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)

    def task_count(self) -> int:
        assert self.loop is not None

        async def count() -> int:
            return len(asyncio.all_tasks()) - 1  # minus this one

        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(timeout=2)


@pytest.mark.parametrize(
    ("knobs", "model"),
    [
        ({"stall_after": 2}, "openai_text_usage_only_last_chunk"),
        ({"delay": 0.25}, "openai_text_usage_only_last_chunk"),
    ],
    ids=["upstream-stalled", "upstream-still-sending"],
)
def test_client_disconnect_closes_the_upstream_and_leaves_nothing_behind(
    knobs: dict[str, Any], model: str
) -> None:
    # Without the close in the stream's `finally`, the fake keeps `open_streams == 1` (stalled:
    # until the 600 s read timeout; still sending: until its last event, ~3 s) and the proxy
    # keeps the request task and the upstream connection; without `active_streams.dec()` the
    # gauge stays at 1.
    fake = FakeUpstream(**knobs)
    settings = Settings().with_values(
        {"upstream.base_url": "http://unused", "repairs.strict": True}
    )
    with serving_in_thread(fake.app) as upstream:
        settings = settings.with_values({"upstream.base_url": f"{upstream.url}/v1"})
        probe = LoopProbe(create_app(settings))
        with serving_in_thread(probe) as proxy:
            proxy_state = proxy.server.server_state
            upstream_state = upstream.server.server_state
            assert httpx.get(f"{proxy.url}/healthz").status_code == 200
            wait_until(
                lambda: not proxy_state.connections, "health check connection closed", timeout=1
            )
            baseline = probe.task_count()

            client = httpx.Client(timeout=CLIENT_TIMEOUT)
            with client.stream(
                "POST", f"{proxy.url}/v1/chat/completions", json=chat(model, stream=True)
            ) as response:
                assert response.status_code == 200
                # Keep the iterator: dropping a half-read httpx iterator closes the connection.
                body = response.iter_raw()
                first = next(body)
                assert first.startswith(b"data: ")
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


# ── 2. the upstream cannot be reached or does not answer ─────────────────────


@contextmanager
def never_accepting_listener() -> Iterator[str]:
    """A loopback port whose connects hang: a listener with backlog 0 that never accepts, its
    accept queue filled by our own connections, so the kernel drops further SYNs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            with suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.05)
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.settimeout(0.3)
        try:
            probe.connect(("127.0.0.1", port))
            pytest.fail("loopback connect did not hang: this kernel accepts past the backlog")
        except TimeoutError:
            pass
        finally:
            probe.close()
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@contextmanager
def failing_upstream(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(base URL, proxy config) of an upstream that fails in the way `kind` names."""
    if kind == "refused":
        yield f"http://127.0.0.1:{free_port()}/v1", {}
    elif kind == "dns":
        yield "http://streamfix-test.invalid/v1", {}
    elif kind == "connect-timeout":
        with never_accepting_listener() as url:
            yield url, {"upstream.connect_timeout": 0.5}
    elif kind == "read-timeout":
        with raw_upstream(Reply(end="hang")) as silent:
            yield f"{silent.url}/v1", {"upstream.read_timeout": 0.5}
    else:
        raise ValueError(kind)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("refused", 502, "upstream_unreachable"),
        ("dns", 502, "upstream_unreachable"),
        ("connect-timeout", 504, "upstream_timeout"),
        ("read-timeout", 504, "upstream_timeout"),
    ],
)
def test_upstream_failures_get_openai_errors(
    kind: str, status: int, code: str, stream: bool
) -> None:
    # Without the mapping in `Proxy._send`, httpx's exception escapes to Starlette (a bare
    # "Internal Server Error" 500 in text/plain); without the configured timeouts the two
    # timeout cases hang for the default 10 s connect / 600 s read and the client times out.
    with failing_upstream(kind) as (url, config), running_proxy(url, **config) as proxy:
        started = time.monotonic()
        response = httpx.post(
            f"{proxy}/v1/chat/completions", json=chat("m", stream=stream), timeout=CLIENT_TIMEOUT
        )
        elapsed = time.monotonic() - started
    assert_openai_error(response, status, code)
    assert elapsed < 5


@pytest.mark.parametrize("kind", ["refused", "read-timeout"])
def test_upstream_failure_errors_carry_the_request_id(kind: str) -> None:
    # The README: "The client's `x-request-id` is used (or one is generated), sent upstream and
    # returned." The proxy's own 400/401/413 return it; without it on a 502/504 the client
    # cannot find the proxy's "upstream failed" log line for its request.
    with failing_upstream(kind) as (url, config), running_proxy(url, **config) as proxy:
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("m", stream=True),
            headers={"x-request-id": "req-fault-42"},
            timeout=CLIENT_TIMEOUT,
        )
    assert response.status_code in (502, 504)
    assert response.headers.get("x-request-id") == "req-fault-42"


def test_read_timeout_is_per_route() -> None:
    # Without per-route timeouts (`Route.timeout` from the route's own settings) the "slow"
    # route would wait the default's 30 s and the client would time out after 10 s; and the
    # "patient" route would give up after the default's 0.5 s instead of getting its answer.
    answer = orjson.dumps({"choices": [{"index": 0, "message": {"role": "assistant"}}]})
    late = Reply(
        pieces=[
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(answer),
            answer,
        ],
        wait=1.5,
    )
    with raw_upstream(Reply(end="hang")) as silent, raw_upstream(late) as slow_but_fine:
        config = {
            "upstream.read_timeout": 30,
            "routes": [
                {
                    "name": "slow",
                    "models": ["slow-*"],
                    "base_url": f"{silent.url}/v1",
                    "read_timeout": 0.5,
                },
                {
                    "name": "patient",
                    "models": ["patient-*"],
                    "base_url": f"{slow_but_fine.url}/v1",
                    "read_timeout": 5,
                },
            ],
        }
        with running_proxy(f"{silent.url}/v1", **config) as proxy:
            started = time.monotonic()
            timed_out = httpx.post(
                f"{proxy}/v1/chat/completions", json=chat("slow-1"), timeout=CLIENT_TIMEOUT
            )
            assert time.monotonic() - started < 3
            assert_openai_error(timed_out, 504, "upstream_timeout")
        # The same routes under a default of 0.5 s: the patient route still waits its 5 s.
        with running_proxy(f"{silent.url}/v1", **config | {"upstream.read_timeout": 0.5}) as p:
            answered = httpx.post(
                f"{p}/v1/chat/completions", json=chat("patient-1"), timeout=CLIENT_TIMEOUT
            )
            assert answered.status_code == 200, answered.text
            assert answered.content == answer


# ── 3. the upstream breaks off mid-stream ────────────────────────────────────


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def delta_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return sse({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


# Gemini-style: `role` on every delta, which the proxy strips after the first.
TEXT_EVENTS = [
    delta_chunk({"role": "assistant", "content": "Hel"}),
    delta_chunk({"role": "assistant", "content": "lo"}),
    delta_chunk({"role": "assistant", "content": " world"}),
]


@pytest.mark.parametrize(
    ("tail", "end", "config", "code"),
    [
        ([], "close", {}, "upstream_failed"),
        ([], "reset", {}, "upstream_failed"),
        ([http_chunk(b'data: {"id":"c1","choices":[{"ind')], "close", {}, "upstream_failed"),
        ([], "hang", {"upstream.read_timeout": 0.5}, "upstream_timeout"),
    ],
    ids=["closed", "reset", "closed-inside-an-event", "stalled-past-read-timeout"],
)
def test_upstream_breaking_off_mid_stream_ends_with_one_error_event(
    tail: list[bytes], end: str, config: dict[str, Any], code: str
) -> None:
    # Without the abort path the client would either hang (stalled upstream), see the proxy's
    # connection break with nothing to say why, or, worse, get the repairs' closing chunks
    # and `[DONE]`, which makes a truncated answer look complete.
    pieces = [http_head(), *(http_chunk(e) for e in TEXT_EVENTS), *tail]
    with (
        raw_upstream(Reply(pieces=pieces, end=end)) as upstream,
        running_proxy(f"{upstream.url}/v1", **config) as proxy,
    ):
        started = time.monotonic()
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("m", stream=True),
            timeout=CLIENT_TIMEOUT,
        )
        elapsed = time.monotonic() - started
    assert elapsed < 5
    assert response.status_code == 200
    body = response.content
    assert body.startswith(TEXT_EVENTS[0])  # untouched events go out as they came
    assert b"[DONE]" not in body
    assert b'{"id":"c1","choices":[{"ind' not in body  # a half event is not forwarded
    items = stream_chunks(body)
    *chunks, last = items
    assert last == {
        "error": {"message": last["error"]["message"], "type": "upstream_error", "code": code}
    }
    assert [c for c in chunks if "error" in c] == []
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d["content"] for d in deltas) == "Hello world"  # everything so far
    assert [("role" in d) for d in deltas] == [True, False, False]  # and repaired
    assert all(c["choices"][0].get("finish_reason") is None for c in chunks)  # none invented
    assert body.endswith(b"\n\n") and body.count(b'"error"') == 1


# ── 4. what is not a chat chunk passes through ───────────────────────────────


PASSTHROUGH_EVENTS = [
    b"data: this is not JSON\n\n",
    b'data: {"unterminated": \n\n',
    b"data: [1, 2, 3]\n\n",
    # Typed, with a chunk-shaped payload that a repair would change (a repeated role) if the
    # proxy mistook it for a chat chunk.
    b'event: foo\ndata: {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}\n\n',
    b"event: foo\ndata: not json either\nid: 7\n\n",
]


def tool_call_stream(interleaved: list[bytes]) -> list[bytes]:
    """A Gemini-style stream (indexless call, role on every delta, finish "stop") with the
    `interleaved` events before and after the call."""
    call = {
        "id": "call_w1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    return [
        delta_chunk({"role": "assistant", "content": "Let me check."}),
        *interleaved[:2],
        delta_chunk({"role": "assistant", "tool_calls": [call]}),
        *interleaved[2:],
        delta_chunk({"role": "assistant"}, finish="stop"),
        b"data: [DONE]\n\n",
    ]


def test_events_that_are_not_chat_chunks_pass_through_and_the_stream_goes_on() -> None:
    # Without the pass-through in `_as_chunk`, non-JSON data would raise or be dropped, the
    # typed events would be fed to the repairs as chunks (or re-encoded), and the stream would
    # end early; the call after them must still be repaired (index 0, finish "tool_calls").
    events = tool_call_stream(PASSTHROUGH_EVENTS)
    with (
        raw_upstream(Reply(pieces=chunked("text/event-stream", events))) as upstream,
        running_proxy(f"{upstream.url}/v1") as proxy,
    ):
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("m", stream=True),
            timeout=CLIENT_TIMEOUT,
        )
    assert response.status_code == 200
    body = response.content
    position = 0
    for event in PASSTHROUGH_EVENTS:  # each one byte-identical, in order
        found = body.find(event, position)
        assert found != -1, (event, body)
        position = found + len(event)
    assert body.startswith(events[0])
    chat_events = body
    for event in PASSTHROUGH_EVENTS:  # the rest is the chat stream, which must be repaired
        chat_events = chat_events.replace(event, b"", 1)
    chunks = stream_chunks(chat_events)[:-1]
    calls = [e for c in chunks for e in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert [(c["index"], c["id"], c["function"]["name"]) for c in calls] == [
        (0, "call_w1", "get_weather")
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert body.endswith(b"data: [DONE]\n\n") and body.count(b"[DONE]") == 1
    assert violations(chat_events) == []


@pytest.mark.parametrize(
    ("content_type", "parts"),
    [
        (
            "application/json",
            [
                b'{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":',
                b'{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":""}}]},'
                b'"finish_reason":"stop"}]}',
            ],
        ),
        ("text/plain; charset=utf-8", [b"upstream says: ", b"data: not really SSE\n"]),
        (None, [b"\x00\x01 binary \xff"]),
    ],
    ids=["json", "text", "no-content-type"],
)
def test_non_sse_body_on_a_stream_request_passes_through_untouched(
    content_type: str | None, parts: list[bytes]
) -> None:
    # Without the `not is_sse` check the body would go through the SSE decoder: the JSON would
    # come back as nothing (no blank line ends an event) or with a `[DONE]` appended.
    with (
        raw_upstream(Reply(pieces=chunked(content_type, parts))) as upstream,
        running_proxy(f"{upstream.url}/v1") as proxy,
    ):
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("m", stream=True),
            timeout=CLIENT_TIMEOUT,
        )
    assert response.status_code == 200
    assert response.content == b"".join(parts)
    if content_type:
        assert response.headers["content-type"] == content_type


# ── 5. one enormous SSE event ────────────────────────────────────────────────

EVENT_LIMIT = 64 * 1024
HUGE_EVENT = 20 * 1024 * 1024
PIECE = 64 * 1024


def huge_event_reply(_: RawRequest) -> Reply:
    """A text chunk, then one `data:` line of 20 MiB that never ends, paced at 64 KiB / 5 ms
    (so reading all of it takes ~1.6 s) and generated lazily (the test stays small too)."""

    def pieces() -> Iterator[bytes]:
        yield http_head()
        yield http_chunk(TEXT_EVENTS[0])
        yield http_chunk(b"data: ")
        for _ in range(HUGE_EVENT // PIECE):
            yield http_chunk(b"x" * PIECE)
        yield http_chunk(b"\n\n")
        yield LAST_CHUNK

    return Reply(pieces=pieces(), pause=0.005)


def test_an_oversized_event_ends_that_stream_only() -> None:
    # Without `server.max_event_bytes` the decoder would buffer all 20 MiB (and more, from a
    # hostile upstream) of one event: the upstream would get to send all of it, and the client
    # would get it after ~1.6 s instead of an error event. Other streams must not notice.
    with (
        running_fake_upstream(delay=0.05) as (fake, fake_root),
        raw_upstream(huge_event_reply) as hostile,
    ):
        config = {
            "server.max_event_bytes": EVENT_LIMIT,
            "routes": [{"name": "hostile", "models": ["huge"], "base_url": f"{hostile.url}/v1"}],
        }
        with (
            running_proxy(f"{fake_root}/v1", **config) as proxy,
            httpx.Client(timeout=CLIENT_TIMEOUT) as client,
        ):
            url = f"{proxy}/v1/chat/completions"
            normal = chat("openai_indexed_parallel", stream=True)
            reference = client.post(url, json=normal).content
            results: dict[str, bytes] = {}

            def other_stream() -> None:
                with httpx.Client(timeout=CLIENT_TIMEOUT) as own:
                    results["normal"] = own.post(url, json=normal).content

            thread = threading.Thread(target=other_stream)
            thread.start()
            started = time.monotonic()
            huge = client.post(url, json=chat("huge", stream=True))
            elapsed = time.monotonic() - started
            thread.join(timeout=10)

            assert huge.status_code == 200
            assert huge.content.startswith(TEXT_EVENTS[0])
            *_, last = stream_chunks(huge.content)
            assert last["error"]["code"] == "event_too_large"
            assert b"[DONE]" not in huge.content
            assert len(huge.content) < 4096  # none of the 'x's reached the client
            assert elapsed < 1.0  # aborted at 64 KiB, not after reading 20 MiB
            wait_until(
                lambda: len(hostile.sent) == 1, "hostile upstream connection closed", timeout=5
            )
            assert hostile.sent[0] < 4 * 1024 * 1024  # the proxy stopped reading early

            assert results["normal"] == reference  # the concurrent stream: byte for byte
            assert violations(reference) == []
            assert client.get(f"{proxy}/healthz").status_code == 200
            again = client.post(url, json=normal)
            assert again.content == reference
            wait_until(lambda: fake.open_streams == 0, "the fake's streams finished", timeout=1)


# ── 6. bad requests the existing tests do not cover ──────────────────────────


@pytest.mark.parametrize("path", ["chat/completions", "embeddings"])
def test_oversized_chunked_body_without_content_length_gets_413(path: str) -> None:
    # Without counting the bytes as they arrive, a chunked body (no Content-Length to check up
    # front) of any size would be read whole and forwarded.
    limit = 1000

    def body() -> Iterator[bytes]:
        yield b'{"model": "openai_no_done", "messages": [], "padding": "'
        for _ in range(3):
            yield b"x" * 1000
        yield b'"}'

    with (
        running_fake_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **{"server.max_request_bytes": limit}) as proxy,
    ):
        response = httpx.post(f"{proxy}/v1/{path}", content=body(), timeout=CLIENT_TIMEOUT)
        assert response.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in response.request.headers
        assert response.status_code == 413
        error = response.json()["error"]
        assert error["code"] == "request_too_large"
        assert str(limit) in error["message"]
        assert fake.requests == []


def test_an_oversized_event_in_small_pieces_costs_linear_time() -> None:
    # The decoder must not re-copy and re-scan everything it holds for every piece: with one
    # 3 MiB line in 4 KiB HTTP chunks, that is 768 passes over up to 3 MiB (~5 s of the event
    # loop here; at the default 8 MiB limit ~35 s), during which every other stream stalls.
    # With linear work the whole exchange takes well under a second.
    limit = 3 * 1024 * 1024
    piece = 4096

    def reply(_: RawRequest) -> Reply:
        def pieces() -> Iterator[bytes]:
            yield http_head()
            yield http_chunk(TEXT_EVENTS[0])
            yield http_chunk(b"data: ")
            for _ in range(limit // piece + 8):
                yield http_chunk(b"x" * piece)
            yield http_chunk(b"\n\n")
            yield LAST_CHUNK

        return Reply(pieces=pieces())

    with (
        running_fake_upstream(delay=0.01) as (_, fake_root),
        raw_upstream(reply) as hostile,
    ):
        config = {
            "server.max_event_bytes": limit,
            "routes": [{"name": "hostile", "models": ["huge"], "base_url": f"{hostile.url}/v1"}],
        }
        with running_proxy(f"{fake_root}/v1", **config) as proxy:
            url = f"{proxy}/v1/chat/completions"
            gaps: list[float] = []
            stop = threading.Event()

            def other_streams() -> None:
                normal = chat("openai_text_usage_only_last_chunk", stream=True)
                with httpx.Client(timeout=CLIENT_TIMEOUT) as own:
                    while not stop.is_set():
                        last = time.monotonic()
                        with own.stream("POST", url, json=normal) as response:
                            for _ in response.iter_raw():
                                now = time.monotonic()
                                gaps.append(now - last)
                                last = now

            thread = threading.Thread(target=other_streams)
            thread.start()
            try:
                wait_until(lambda: gaps, "another stream under way")
                started = time.monotonic()
                huge = httpx.post(url, json=chat("huge", stream=True), timeout=60)
                elapsed = time.monotonic() - started
            finally:
                stop.set()
                thread.join(timeout=15)
    *_, last = stream_chunks(huge.content)
    assert last["error"]["code"] == "event_too_large"
    assert elapsed < 2.0, f"rejecting a {limit}-byte event took {elapsed:.2f}s"
    assert gaps and max(gaps) < 0.5, f"another stream stalled for {max(gaps):.2f}s"
