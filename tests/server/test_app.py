"""The proxy over real sockets: forwarding, passthrough, errors, limits, non-streaming repairs."""

from __future__ import annotations

import httpx
import pytest

from proxy.repair.conformance import stream_chunks, violations
from tests.support.fake_upstream import FakeUpstream, load_transcript, running_fake_upstream
from tests.support.openai_errors import as_chat_clients_get
from tests.support.proxies import running_proxy
from tests.support.servers import free_port


@pytest.fixture(scope="module")
def stack():
    """(fake upstream, proxy root URL, upstream root URL) shared by this module's tests."""
    with running_fake_upstream() as (fake, upstream), running_proxy(f"{upstream}/v1") as proxy:
        yield fake, proxy, upstream


def chat(name: str, **extra) -> dict:
    return {"model": name, "messages": [{"role": "user", "content": "go"}], **extra}


def last_request(fake: FakeUpstream):
    return fake.requests[-1]


def test_healthz(stack) -> None:
    _, proxy, _ = stack
    assert httpx.get(f"{proxy}/healthz").status_code == 200


def test_streamed_chat_is_repaired_and_authorization_passes_through(stack) -> None:
    fake, proxy, _upstream = stack
    response = httpx.post(
        f"{proxy}/v1/chat/completions",
        json=chat("gemini_indexless_call_stop", stream=True),
        headers={"authorization": "Bearer sk-client", "x-request-id": "req-42"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache, no-store, no-transform"
    assert response.headers["x-request-id"] == "req-42"
    assert violations(response.content) == []
    sent = last_request(fake)
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-client"
    assert sent.headers["x-request-id"] == "req-42"
    assert sent.headers["accept-encoding"] == "identity"


def test_request_body_forwarded_byte_for_byte(stack) -> None:
    fake, proxy, _upstream = stack
    raw = b'{"model":"openai_no_done", "messages":[{"role":"user","content":"\\u2028"}],"stream":1}'
    httpx.post(
        f"{proxy}/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
    )
    assert last_request(fake).raw == raw


def test_hop_by_hop_headers_are_dropped(stack) -> None:
    fake, proxy, _upstream = stack
    httpx.get(
        f"{proxy}/v1/models",
        headers={
            "connection": "keep-alive, x-private-hop",
            "x-private-hop": "1",
            "te": "trailers",
            "proxy-authorization": "Basic abc",
            "x-kept": "yes",
        },
    )
    headers = last_request(fake).headers
    assert headers["x-kept"] == "yes"
    for name in ("x-private-hop", "te", "proxy-authorization"):
        assert name not in headers


def test_other_paths_pass_through_with_query_and_method(stack) -> None:
    _fake, proxy, _upstream = stack
    response = httpx.post(f"{proxy}/v1/embeddings?api-version=2&x=a%20b", json={"input": "hi"})
    assert response.status_code == 200
    echoed = response.json()
    assert echoed["method"] == "POST"
    assert echoed["path"] == "/v1/embeddings"
    assert echoed["query"] == "api-version=2&x=a%20b"
    assert echoed["json"] == {"input": "hi"}
    models = httpx.get(f"{proxy}/v1/models")
    assert models.status_code == 200
    assert "gemini_indexless_call_stop" in {m["id"] for m in models.json()["data"]}
    delete = httpx.delete(f"{proxy}/v1/files/f-1")
    assert delete.json()["method"] == "DELETE"


@pytest.mark.parametrize(
    ("model", "status"), [("error_gemini_array", 400), ("error_openai_401", 401)]
)
def test_upstream_errors_reach_client_with_status_and_body_unchanged(stack, model, status) -> None:
    # Unchanged but for Google's array around its error object, which OpenAI's clients cannot
    # read (repair/error_shape.py).
    _fake, proxy, upstream = stack
    body = chat(model, stream=True)
    direct = httpx.post(f"{upstream}/v1/chat/completions", json=body)
    via_proxy = httpx.post(f"{proxy}/v1/chat/completions", json=body)
    assert via_proxy.status_code == direct.status_code == status
    assert via_proxy.content == as_chat_clients_get(direct.content)
    if model == "error_gemini_array":
        assert direct.json()[0]["error"]["status"] == "INVALID_ARGUMENT"
        assert via_proxy.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert "error_body_unwrapped:1" in via_proxy.headers["x-streamfix-repairs"]


def test_non_streamed_response_gets_type_and_finish_repaired(stack) -> None:
    _, proxy, _ = stack
    response = httpx.post(f"{proxy}/v1/chat/completions", json=chat("gemini_indexless_call_stop"))
    assert response.status_code == 200
    choice = response.json()["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["id"] == "623rbkd0"
    assert choice["finish_reason"] == "tool_calls"


def test_non_streamed_call_without_id_or_name_is_completed(stack) -> None:
    _, proxy, _ = stack
    body = chat(
        "vllm_gemma4_missing_id_name",
        **load_transcript("vllm_gemma4_missing_id_name").meta["request"],
    )
    response = httpx.post(f"{proxy}/v1/chat/completions", json=body)
    (call,) = response.json()["choices"][0]["message"]["tool_calls"]
    assert call["id"] and call["function"]["name"]


@pytest.mark.parametrize(
    ("raw", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model": "x"}', 400, "messages"),
        (b'{"model": "x", "messages": "hi"}', 400, "messages"),
    ],
)
def test_bad_requests_get_openai_errors_and_are_not_forwarded(stack, raw, status, fragment) -> None:
    fake, proxy, _upstream = stack
    before = len(fake.requests)
    response = httpx.post(f"{proxy}/v1/chat/completions", content=raw)
    assert response.status_code == status
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert len(fake.requests) == before


def test_oversized_body_gets_413() -> None:
    with (
        running_fake_upstream() as (fake, upstream),
        running_proxy(f"{upstream}/v1", **{"server.max_request_bytes": 1000}) as proxy,
    ):
        big = chat("openai_no_done", padding="x" * 2000)
        response = httpx.post(f"{proxy}/v1/chat/completions", json=big)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
        assert fake.requests == []


def test_unreachable_upstream_gives_502_in_openai_format() -> None:
    with running_proxy(f"http://127.0.0.1:{free_port()}/v1") as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=chat("m", stream=True))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"


def test_gemini_style_base_url_path_is_kept() -> None:
    with (
        running_fake_upstream() as (fake, upstream),
        running_proxy(f"{upstream}/v1beta/openai") as proxy,
    ):
        response = httpx.post(
            f"{proxy}/v1/chat/completions", json=chat("gemini_empty_id", stream=True)
        )
        assert fake.requests[-1].path == "/v1beta/openai/chat/completions"
        calls = [
            c
            for c in stream_chunks(response.content)
            if isinstance(c, dict) and c["choices"] and c["choices"][0]["delta"].get("tool_calls")
        ]
        assert calls[0]["choices"][0]["delta"]["tool_calls"][0]["id"].startswith("call_")
