"""Upstream failures, over real sockets: an upstream that cannot be reached, does not answer or
breaks off mid-stream gets the client an OpenAI-format error (with the request id, the read
timeout per route), and a broken stream ends with exactly one error event.

Every test runs the real proxy under uvicorn on loopback, in front of a `RawUpstream`
(tests/support/raw_upstream.py) or a listener that never accepts. The only name that is not
127.0.0.1 is `streamfix-test.invalid`: the reserved `.invalid` TLD never resolves. Each test says
in a comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx
import orjson
import pytest

from proxy.repair.conformance import stream_chunks
from tests.support.chat_requests import CLIENT_TIMEOUT, chat
from tests.support.openai_errors import assert_openai_error
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import (
    TEXT_EVENTS,
    Reply,
    http_chunk,
    http_head,
    raw_upstream,
)
from tests.support.servers import free_port

# ── the upstream cannot be reached or does not answer ────────────────────────


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


# ── the upstream breaks off mid-stream ───────────────────────────────────────


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
