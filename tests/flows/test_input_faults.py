"""Unusual input, over real sockets: events that are not chat chunks and a non-SSE body on a
stream request pass through untouched; one enormous SSE event ends that stream only, and costs
linear time however it is cut; an oversized chunked request body without Content-Length gets
413.

Every test runs the real proxy under uvicorn on loopback, in front of a `RawUpstream`
(tests/support/raw_upstream.py) that sends exactly the bytes a test scripts. Each test says in a
comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from proxy.repair.conformance import stream_chunks, violations
from tests.support.chat_requests import CLIENT_TIMEOUT, chat
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import (
    LAST_CHUNK,
    TEXT_EVENTS,
    RawRequest,
    Reply,
    chunked,
    delta_chunk,
    http_chunk,
    http_head,
    raw_upstream,
)
from tests.support.waiting import wait_until


def streamed_through_proxy(content_type: str | None, parts: list[bytes]) -> httpx.Response:
    """A stream request through the proxy to a raw upstream that answers `parts` as a chunked
    body of `content_type`."""
    with (
        raw_upstream(Reply(pieces=chunked(content_type, parts))) as upstream,
        running_proxy(f"{upstream.url}/v1") as proxy,
    ):
        return httpx.post(
            f"{proxy}/v1/chat/completions", json=chat("m", stream=True), timeout=CLIENT_TIMEOUT
        )


# ── what is not a chat chunk passes through ──────────────────────────────────


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
    # Without the pass-through in `as_chunk`, non-JSON data would raise or be dropped, the
    # typed events would be fed to the repairs as chunks (or re-encoded), and the stream would
    # end early; the call after them must still be repaired (index 0, finish "tool_calls").
    events = tool_call_stream(PASSTHROUGH_EVENTS)
    response = streamed_through_proxy("text/event-stream", events)
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
    response = streamed_through_proxy(content_type, parts)
    assert response.status_code == 200
    assert response.content == b"".join(parts)
    if content_type:
        assert response.headers["content-type"] == content_type


# ── one enormous SSE event ───────────────────────────────────────────────────

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
            assert violations(reference, "auto") == []
            assert client.get(f"{proxy}/healthz").status_code == 200
            again = client.post(url, json=normal)
            assert again.content == reference
            wait_until(lambda: fake.open_streams == 0, "the fake's streams finished", timeout=1)


# ── bad requests ─────────────────────────────────────────────────────────────


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
