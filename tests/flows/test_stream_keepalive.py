"""A stream through the middle: keepalive comments while the upstream is silent, the headers
that keep proxies in between from buffering, caching or compressing it, and each event sent as
soon as it is ready.

The proxy runs as `streamfix serve` runs it (uvicorn with the proxy's own protocol, which
gathers one loop turn's writes into one send) on loopback; the upstream is a raw TCP server
that sends each piece of its script as one HTTP chunk, pausing where the script says. Every
test says in a comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from proxy.server.app import create_app
from proxy.server.serving import uvicorn_config
from proxy.settings.schema import Settings
from tests.support.chat_requests import CLIENT_TIMEOUT, chat
from tests.support.raw_upstream import (
    LAST_CHUNK,
    TEXT_EVENTS,
    Reply,
    delta_chunk,
    http_chunk,
    http_head,
    raw_upstream,
    sse,
)
from tests.support.servers import free_port, serving_config_in_thread

KEEPALIVE = b": keepalive\n\n"
INTERVAL = 0.25
SILENCE = 0.8  # more than three intervals
DONE = b"data: [DONE]\n\n"
Step = bytes | float  # bytes: one HTTP chunk; a float: that many seconds of silence


def script(*steps: Step) -> Iterator[bytes]:
    """The upstream's response: its head, then the steps, then the last chunk."""
    yield http_head()
    for step in steps:
        if isinstance(step, float):
            time.sleep(step)  # the upstream's own thread; bounded by the script
        else:
            yield http_chunk(step)
    yield LAST_CHUNK


@contextmanager
def proxy_in_front_of(upstream: str, keepalive: float) -> Iterator[str]:
    settings = Settings().with_values(
        {
            "upstream.base_url": f"{upstream}/v1",
            "server.port": free_port(),
            "server.keepalive_seconds": keepalive,
            "repairs.strict": True,
        }
    )
    app = create_app(settings)
    with serving_config_in_thread(uvicorn_config(app, settings.server, "warning")) as served:
        yield served.url


def received(*steps: Step, keepalive: float) -> list[tuple[float, bytes]]:
    """What a client read from a stream through the proxy, piece by piece, with when it came
    (seconds since the request was sent)."""
    with (
        raw_upstream(lambda _: Reply(pieces=script(*steps))) as upstream,
        proxy_in_front_of(upstream.url, keepalive) as proxy,
        httpx.Client(timeout=CLIENT_TIMEOUT) as client,
    ):
        start = time.monotonic()
        request = chat("m", stream=True)
        with client.stream("POST", f"{proxy}/v1/chat/completions", json=request) as response:
            assert response.status_code == 200
            return [(time.monotonic() - start, piece) for piece in response.iter_raw()]


def body(pieces: list[tuple[float, bytes]]) -> bytes:
    return b"".join(piece for _, piece in pieces)


def between_whole_events(stream: bytes) -> bool:
    """Every keepalive starts the stream or follows an event's closing blank line."""
    at = stream.find(KEEPALIVE)
    while at != -1:
        if at and not stream[:at].endswith(b"\n\n"):
            return False
        at = stream.find(KEEPALIVE, at + 1)
    return True


def first_arrival(pieces: list[tuple[float, bytes]], marker: bytes) -> float:
    return next(when for when, piece in pieces if marker in piece)


def test_a_silent_upstream_gets_a_keepalive_within_two_intervals_and_nothing_else_changes() -> None:
    # Without keepalives a client (or nginx, or a load balancer) in front of the proxy sees
    # nothing for the whole silence, and cuts a stream whose model is thinking. Without the
    # byte comparison a keepalive could replace or reorder the stream's own bytes unnoticed.
    steps: list[Step] = [TEXT_EVENTS[0], SILENCE, TEXT_EVENTS[1], TEXT_EVENTS[2], DONE]
    with_keepalive = received(*steps, keepalive=INTERVAL)
    without = received(*steps, keepalive=0.0)

    stream = body(with_keepalive)
    assert KEEPALIVE not in body(without)
    assert stream.replace(KEEPALIVE, b"") == body(without)
    assert 2 <= stream.count(KEEPALIVE) <= 4  # one per interval of the silence
    gap = first_arrival(with_keepalive, KEEPALIVE) - first_arrival(with_keepalive, b"Hel")
    assert gap < 2 * INTERVAL
    assert between_whole_events(stream)
    assert stream.endswith(DONE)  # nothing after the last word


def test_an_event_half_sent_before_a_silence_reaches_the_client_whole() -> None:
    # The upstream sends half an event and pauses. The proxy forwards whole events only, so the
    # client has nothing open while it waits and a keepalive goes between whole events; a
    # proxy that forwarded the half (or put its comment at the byte where the upstream paused)
    # would hand the client a comment line inside an event.
    second = TEXT_EVENTS[1]
    steps: list[Step] = [TEXT_EVENTS[0], second[:20], SILENCE, second[20:], TEXT_EVENTS[2], DONE]
    with_keepalive = received(*steps, keepalive=INTERVAL)
    without = received(*steps, keepalive=0.0)

    stream = body(with_keepalive)
    assert stream.replace(KEEPALIVE, b"") == body(without)
    assert stream.count(KEEPALIVE) >= 2  # the silence was covered, mid-event upstream or not
    assert between_whole_events(stream)
    assert first_arrival(with_keepalive, KEEPALIVE) < first_arrival(with_keepalive, b"lo")


def test_no_keepalive_after_the_upstreams_own_error_event() -> None:
    # An in-band error is the stream's last word: what the upstream sends after it passes as
    # received, and nothing is added. A keepalive after it would keep a failed stream looking
    # alive to the client until the upstream hangs up.
    error = sse({"error": {"message": "overloaded", "type": "server_error", "code": 503}})
    steps: list[Step] = [TEXT_EVENTS[0], SILENCE, error, SILENCE]
    stream = body(received(*steps, keepalive=INTERVAL))

    assert stream.count(KEEPALIVE) >= 2  # during the first silence
    assert stream.endswith(error)  # and none in the second, after the error
    assert DONE not in stream


def test_no_keepalive_when_switched_off() -> None:
    # `keepalive_seconds = 0` is documented as "never": a client that parses comments badly
    # must be able to turn them off.
    stream = body(received(TEXT_EVENTS[0], SILENCE, TEXT_EVENTS[1], DONE, keepalive=0.0))
    assert b": " not in stream.replace(b"data: ", b"")


def test_each_event_reaches_the_client_before_the_upstream_sends_the_next() -> None:
    # A proxy that buffered (its own or a middle box's, told by the headers below) would hold
    # the first event until the second came: the client's read of event 1 would wait for the
    # upstream, which here waits for that read, up to its 5 s bound.
    read_first = threading.Event()
    sent_second = threading.Event()

    def gated() -> Iterator[bytes]:
        yield http_head()
        yield http_chunk(TEXT_EVENTS[0])
        read_first.wait(5)
        sent_second.set()
        yield http_chunk(TEXT_EVENTS[1])
        yield http_chunk(DONE)
        yield LAST_CHUNK

    with (
        raw_upstream(lambda _: Reply(pieces=gated())) as upstream,
        proxy_in_front_of(upstream.url, INTERVAL) as proxy,
        httpx.Client(timeout=CLIENT_TIMEOUT) as client,
    ):
        request = chat("m", stream=True)
        with client.stream("POST", f"{proxy}/v1/chat/completions", json=request) as response:
            pieces = response.iter_raw()
            first = next(pieces)
            assert b"Hel" in first
            assert not sent_second.is_set()
            read_first.set()
            rest = b"".join(pieces)
    assert b"lo" in rest and rest.endswith(DONE)


def test_sse_headers_are_set_and_a_compressed_upstream_is_not_passed_on_compressed() -> None:
    # `no-transform` keeps a compressing proxy in between from gzipping the stream (which then
    # arrives in bursts), `X-Accel-Buffering: no` keeps nginx from buffering it, and the
    # upstream's own caching and buffering headers must not win. The proxy decodes a gzip
    # upstream to repair it: passing on the upstream's `Content-Encoding: gzip` would make
    # the client gunzip plain text; and the proxy compresses nothing itself, whatever the
    # client accepts.
    events = [*TEXT_EVENTS, DONE]
    compressed = gzip.compress(b"".join(events))
    head = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n"
        b"content-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
        b"cache-control: public, max-age=600\r\nx-accel-buffering: yes\r\n\r\n"
    )
    reply = Reply(pieces=[head, http_chunk(compressed), LAST_CHUNK])
    with (
        raw_upstream(reply) as upstream,
        proxy_in_front_of(upstream.url, INTERVAL) as proxy,
        httpx.Client(timeout=CLIENT_TIMEOUT) as client,
    ):
        response = client.post(
            f"{proxy}/v1/chat/completions",
            json=chat("m", stream=True),
            headers={"accept-encoding": "gzip, deflate, br"},
        )
    assert response.status_code == 200
    assert response.headers.get_list("cache-control") == ["no-cache, no-store, no-transform"]
    assert response.headers.get_list("x-accel-buffering") == ["no"]
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "content-encoding" not in response.headers
    assert response.content.startswith(b"data: ")
    assert response.content.endswith(DONE)
    assert b'"content":"Hel"' in response.content


def test_a_tool_call_stream_keeps_its_bytes_with_keepalives_between() -> None:
    # A call's fragments with a silence in the middle of its arguments: the repairs see the
    # same events with keepalives on or off, so the client gets the same call.
    call = {"index": 0, "id": "call_1", "type": "function"}
    steps: list[Step] = [
        delta_chunk({"role": "assistant", "tool_calls": [{**call, "function": {"name": "f"}}]}),
        delta_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}),
        SILENCE,
        delta_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        delta_chunk({}, finish="tool_calls"),
        DONE,
    ]
    stream = body(received(*steps, keepalive=INTERVAL))
    assert stream.count(KEEPALIVE) >= 2
    assert stream.replace(KEEPALIVE, b"") == body(received(*steps, keepalive=0.0))
    assert between_whole_events(stream)
