"""Wire fidelity and bounds, end to end: what reaches the upstream is what the client sent, every
spelling of the chat route is repaired, and nothing an upstream sends can make the proxy buffer
without bound.

Every test runs the real proxy under uvicorn on 127.0.0.1 against a scripted raw-TCP upstream
(tests/support/raw_upstream.py) or the transcript fake. Each says what broke before.
"""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from tests.support.fake_upstream import load_transcript, running_fake_upstream
from tests.support.openai_errors import assert_openai_error
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import LAST_CHUNK, RawRequest, Reply, http_chunk, raw_upstream

TIMEOUT = httpx.Timeout(10.0)


def request_line(request: RawRequest) -> bytes:
    return request.head.split(b"\r\n", 1)[0]


def header_lines(request: RawRequest) -> list[bytes]:
    return request.head.split(b"\r\n")[1:]


def send_raw(proxy_url: str, head: bytes, body: bytes = b"") -> tuple[int, bytes, bytes]:
    """One request written byte for byte (httpx would normalise the path); the status, the
    response head and body. Bounded by a socket timeout."""
    host, port = proxy_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    response_head, _, response_body = data.partition(b"\r\n\r\n")
    return int(response_head.split(b" ", 2)[1]), response_head, response_body


def get_head(path: bytes, *extra: bytes) -> bytes:
    lines = [b"GET " + path + b" HTTP/1.1", b"host: 127.0.0.1", b"connection: close", *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def json_reply(body: Any, *headers: bytes) -> Reply:
    data = json.dumps(body, separators=(",", ":")).encode()  # orjson cannot write BIG
    head = [b"HTTP/1.1 200 OK", b"content-type: application/json", *headers]
    head.append(f"content-length: {len(data)}".encode())
    return Reply(pieces=[b"\r\n".join(head) + b"\r\n\r\n" + data])


@contextmanager
def proxy_before(upstream_url: str, **values: Any) -> Iterator[str]:
    with running_proxy(f"{upstream_url}/v1", **values) as url:
        yield url


# ── 8. the path stays the client's, and under the base path ─────────────────


@pytest.mark.parametrize(
    "path",
    [b"/v1/files/a%2Fb", b"/v1/files/%ff", b"/v1/files/x%3Fy", b"/v1/files/caf%C3%A9"],
)
def test_the_clients_path_bytes_reach_the_upstream_as_sent(path: bytes) -> None:
    # Before: the path was decoded and re-encoded: a%2Fb became a/b, %ff became %EF%BF%BD and
    # %3F a query string.
    with raw_upstream(json_reply({"ok": True})) as upstream, proxy_before(upstream.url) as proxy:
        status, _, _ = send_raw(proxy, get_head(path))
    assert status == 200
    assert request_line(upstream.requests[0]) == b"GET " + path + b" HTTP/1.1"


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/..%3Fx=1",
        b"/v1/..%23f",
        b"/v1/%2e%2e/admin",
        b"/v1/files/..%2F..%2Fadmin",
        b"/v1/%252e%252e/admin",
        b"/v1/files/..%5Cadmin",
    ],
)
def test_a_path_that_would_leave_the_base_path_is_refused(path: bytes) -> None:
    # Before: /v1/..%3Fx=1 reached the upstream as GET /?x=1 and /v1/..%23f as GET /.
    with raw_upstream(json_reply({"ok": True})) as upstream, proxy_before(upstream.url) as proxy:
        status, head, body = send_raw(proxy, get_head(path))
    assert status == 400, head
    assert orjson.loads(body)["error"]["code"] == "invalid_path"
    assert upstream.requests == []


@pytest.mark.parametrize("path", ["/v1/chat/completions/", "/v1//chat/completions"])
def test_every_spelling_of_the_chat_route_gets_the_repairs(path: str) -> None:
    # Before: both were forwarded as /v1/chat/completions but skipped every repair, so the
    # client got Gemini's index-less call and finish_reason "stop".
    body = {
        "model": "gemini_indexless_call_stop",
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
    }
    with running_fake_upstream() as (fake, root), proxy_before(root) as proxy:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n"
            f"content-type: application/json\r\ncontent-length: {len(orjson.dumps(body))}\r\n\r\n"
        ).encode()
        status, _, raw = send_raw(proxy, head, orjson.dumps(body))
    assert status == 200
    assert fake.requests[0].path == "/v1/chat/completions"
    text = raw.decode("latin-1")
    assert '"finish_reason":"tool_calls"' in text
    assert '"index":0,"id":"623rbkd0"' in text


# ── 10. headers: the client's bytes, one line per field ──────────────────────


@pytest.mark.parametrize("path", [b"/v1/models", b"/v1/chat/completions"])
def test_a_utf8_header_value_crosses_unchanged(path: bytes) -> None:
    # Before: X-Title: Café (UTF-8) gave a 500 on chat and a text/plain traceback page on every
    # other path.
    reply = json_reply({"object": "list", "data": []})
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    head = (
        b"POST " + path + b" HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n"
        b"x-title: Caf\xc3\xa9\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    with raw_upstream(reply) as upstream, proxy_before(upstream.url) as proxy:
        status, response_head, _ = send_raw(proxy, head, body)
    assert status == 200, response_head
    assert b"x-title: Caf\xc3\xa9" in header_lines(upstream.requests[0])


def test_unexpected_errors_off_the_chat_route_answer_in_openais_format() -> None:
    # Before: Starlette's plain-text "Internal Server Error" (or its traceback page).
    class Broken(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            raise RuntimeError("a bug")

    from proxy.server.app import create_app
    from proxy.settings.schema import Settings
    from tests.support.servers import serve_in_thread

    settings = Settings().with_values({"upstream.base_url": "http://127.0.0.1:9/v1"})
    with serve_in_thread(create_app(settings, transport=Broken())) as proxy:
        response = httpx.get(f"{proxy}/v1/models", timeout=TIMEOUT)
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"


@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions"])
def test_two_set_cookie_fields_stay_two(path: str) -> None:
    # Before: the response headers went through a dict and came out as "a=1, b=2".
    reply = json_reply({"object": "list", "data": []}, b"set-cookie: a=1", b"set-cookie: b=2")
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    with raw_upstream(reply) as upstream, proxy_before(upstream.url) as proxy:
        response = httpx.post(f"{proxy}{path}", json=body, timeout=TIMEOUT)
    assert response.status_code == 200
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]


# ── 10. integers beyond 64 bits stay exact ───────────────────────────────────

BIG = 123456789012345678901234567890


def test_a_big_integer_survives_a_request_the_proxy_rewrites() -> None:
    # Before: orjson read the seed as 1.2345678901234568e+29 and the upstream got that float.
    body = {"model": "alias", "messages": [{"role": "user", "content": "x"}], "seed": BIG}
    reply = json_reply({"choices": []})
    with (
        raw_upstream(reply) as upstream,
        proxy_before(upstream.url, **{"upstream.model": "real"}) as proxy,
    ):
        httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=TIMEOUT)
    sent = upstream.requests[0].body
    assert b'"model":"real"' in sent
    assert b'"seed":' + str(BIG).encode() in sent


def test_a_big_integer_survives_a_response_the_proxy_repairs() -> None:
    completion = {
        "id": "c",
        "object": "chat.completion",
        "big": BIG,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",  # rewritten to tool_calls: the body is re-encoded
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
    }
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    with raw_upstream(json_reply(completion)) as upstream, proxy_before(upstream.url) as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert response.status_code == 200
    assert b'"finish_reason":"tool_calls"' in response.content
    assert b'"big":' + str(BIG).encode() in response.content


# ── 4. bounded buffers ───────────────────────────────────────────────────────

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def sized_json_reply(size: int, chunked_body: bool) -> Reply:
    data = b'{"pad":"' + b"x" * size + b'"}'
    if not chunked_body:
        head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(data)}"
        return Reply(pieces=[head.encode() + b"\r\n\r\n" + data])
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    pieces = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    return Reply(pieces=[head, *(http_chunk(p) for p in pieces), LAST_CHUNK])


@pytest.mark.parametrize("chunked_body", [False, True])
def test_a_non_streamed_body_past_the_cap_is_a_502_and_the_proxy_stays_up(chunked_body) -> None:
    # Before: the proxy read any body whole (600 MB took RSS to 1.4 GB).
    reply = sized_json_reply(3 * 1024 * 1024, chunked_body)
    limits = {"server.max_response_bytes": 1024 * 1024}
    with raw_upstream(reply) as upstream, proxy_before(upstream.url, **limits) as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=CHAT, timeout=TIMEOUT)
        health = httpx.get(f"{proxy}/healthz", timeout=TIMEOUT)
    error = assert_openai_error(response, 502, "response_too_large")
    assert "1048576 bytes" in error["message"]
    assert health.status_code == 200


def gzip_reply(content_type: str, data: bytes, encoding: bytes = b"gzip") -> Reply:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type.encode() + b"\r\n"
        b"content-encoding: " + encoding + b"\r\ncontent-length: " + str(len(data)).encode()
    )
    return Reply(pieces=[head + b"\r\n\r\n" + data])


def test_a_gzip_bomb_is_stopped_at_the_cap_not_expanded() -> None:
    # Before: httpx decompressed whatever came, despite accept-encoding: identity (a 1 MB bomb
    # took RSS to 2.2 GB). 64 MiB of zeros compress to about 64 KiB.
    bomb = gzip.compress(b'{"pad":"' + b"0" * (64 * 1024 * 1024) + b'"}', compresslevel=9)
    limits = {"server.max_response_bytes": 1024 * 1024}
    reply = gzip_reply("application/json", bomb)
    with raw_upstream(reply) as upstream, proxy_before(upstream.url, **limits) as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=CHAT, timeout=TIMEOUT)
    assert_openai_error(response, 502, "response_too_large")


def test_a_gzipped_stream_is_decoded_repaired_and_sent_plain() -> None:
    events = load_transcript("gemini_indexless_call_stop").sse
    reply = gzip_reply("text/event-stream", gzip.compress(events))
    body = {**CHAT, "stream": True}
    with raw_upstream(reply) as upstream, proxy_before(upstream.url) as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert response.status_code == 200
    assert "content-encoding" not in response.headers
    assert b'"finish_reason":"tool_calls"' in response.content
    assert response.content.endswith(b"data: [DONE]\n\n")


def test_an_encoding_the_proxy_does_not_decode_is_relayed_with_its_header() -> None:
    # Before: the header was stripped while the bytes stayed encoded, so no client could read
    # the body.
    opaque = b"\x8b\x02\x80not-really-brotli\x03"
    body = {**CHAT, "stream": True}
    reply = gzip_reply("text/event-stream", opaque, encoding=b"br")
    with raw_upstream(reply) as upstream, proxy_before(upstream.url) as proxy:
        with httpx.stream(
            "POST", f"{proxy}/v1/chat/completions", json=body, timeout=TIMEOUT
        ) as response:
            raw = b"".join(response.iter_raw())
        metrics = httpx.get(f"{proxy}/metrics", timeout=TIMEOUT).text
    assert response.headers["content-encoding"] == "br"
    assert raw == opaque
    assert 'streamfix_repairs_total{kind="unrepaired_encoding",route="default"} 1.0' in metrics


def test_tool_call_fragments_past_the_budget_end_the_stream_with_an_error() -> None:
    # Before: 500 fragments of 1 MB each were assembled into one 500 MB call event, outside
    # max_event_bytes.
    def fragment(text: str, first: bool) -> bytes:
        call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
        if first:
            call.update(id="call_1", type="function", function={"name": "f", "arguments": text})
        chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    events = [fragment('{"a":"', True), *(fragment("x" * 4096, False) for _ in range(64))]
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    reply = Reply(pieces=[head, *(http_chunk(e) for e in events), LAST_CHUNK])
    limits = {"tool_calls.max_buffered_bytes": 64 * 1024}
    body = {**CHAT, "stream": True}
    with raw_upstream(reply) as upstream, proxy_before(upstream.url, **limits) as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert response.status_code == 200
    assert b'"code":"tool_calls_too_large"' in response.content
    assert b"[DONE]" not in response.content
    assert b'"finish_reason"' not in response.content


def test_a_double_slash_target_never_names_another_host() -> None:
    # `//host/...` is a network-path reference: joined naively onto a base URL it would name
    # another host. Normalised once, it is just a path the proxy does not serve.
    with raw_upstream(json_reply({"ok": True})) as upstream, proxy_before(upstream.url) as proxy:
        status, _, body = send_raw(proxy, get_head(b"//evil.example/v1/models"))
        inside, _, _ = send_raw(proxy, get_head(b"/v1//evil.example/models"))
    assert status == 404
    assert orjson.loads(body)["error"]["code"] == "not_found"  # OpenAI's format, not text
    assert inside == 200
    assert [request_line(r) for r in upstream.requests] == [b"GET /v1/evil.example/models HTTP/1.1"]


def test_a_clients_credential_in_any_form_stays_behind_when_the_route_spends_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: only Authorization and x-api-key were dropped, so a client's x-goog-api-key,
    # api-key or ?key= travelled upstream beside the route's own key.
    monkeypatch.setenv("TEST_ROUTE_KEY", "sk-route")
    monkeypatch.setenv("STREAMFIX_API_KEYS", "sk-proxy")
    with (
        raw_upstream(json_reply({"object": "list", "data": []})) as upstream,
        proxy_before(upstream.url, **{"upstream.api_key_env": "TEST_ROUTE_KEY"}) as proxy,
    ):
        response = httpx.get(
            f"{proxy}/v1/models?key=client-q&alt=sse&api_key=client-q2",
            headers={
                "authorization": "Bearer sk-proxy",
                "x-goog-api-key": "client-g",
                "api-key": "client-a",
            },
            timeout=TIMEOUT,
        )
    assert response.status_code == 200
    head = upstream.requests[0].head
    assert request_line(upstream.requests[0]) == b"GET /v1/models?alt=sse HTTP/1.1"
    assert b"authorization: Bearer sk-route" in header_lines(upstream.requests[0])
    for secret in (b"client-", b"sk-proxy"):
        assert secret not in head
