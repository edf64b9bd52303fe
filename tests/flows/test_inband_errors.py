"""An upstream's own error inside an HTTP 200 stream reaches the client as sent, with nothing
invented after it.

Groq ends a failed tool turn with `event: error` (`tool_use_failed`) and no `[DONE]`; OpenRouter
sends a chunk with a top-level `error` and then its own `[DONE]`. Before, the proxy added the
repairs' closing finish ("stop") and a `[DONE]` after the error, and the Vercel AI SDK then
reported a normal stop where, talking to the upstream directly, it reported the error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.repair.conformance import stream_chunks
from tests.clients.vercel import SDK_VERSIONS, run_vercel
from tests.support.fake_upstream import load_transcript, running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.streams import repair_stream, sse

GROQ = "groq_event_error_midstream"
OPENROUTER = "openrouter_error_chunk_midstream"
ERROR_CASES = [GROQ, OPENROUTER]
EMITS = ("auto", "atomic", "incremental")

ENVELOPE = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "m"}
TOOL_USE_FAILED = {"error": {"message": "Tool call validation failed", "code": "tool_use_failed"}}


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def finishes(body: bytes) -> list[Any]:
    return [
        choice.get("finish_reason")
        for item in stream_chunks(body)
        if isinstance(item, dict)
        for choice in item.get("choices") or ()
        if choice.get("finish_reason") is not None
    ]


# ── the pipeline in-process ──────────────────────────────────────────────────


@pytest.mark.parametrize("emit", EMITS)
def test_an_error_event_is_the_last_thing_sent(emit: str) -> None:
    body = load_transcript(GROQ).sse
    out = repair_stream(body, {"messages": []}, emit=emit)
    assert out == body  # nothing changed, nothing added: no finish, no [DONE]


@pytest.mark.parametrize("emit", EMITS)
def test_an_error_chunk_passes_as_received_and_only_the_upstreams_done_follows(
    emit: str,
) -> None:
    body = load_transcript(OPENROUTER).sse
    error_event = next(e for e in body.split(b"\n\n") if b'"error"' in e) + b"\n\n"
    out = repair_stream(body, {"messages": []}, emit=emit)
    assert out.endswith(error_event + b"data: [DONE]\n\n")
    assert out.count(b"[DONE]") == 1
    assert finishes(out) == []


def test_calls_held_for_atomic_emission_are_not_sent_after_an_error() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{"}}
    body = sse(chunk({"role": "assistant", "tool_calls": [call]})) + (
        b"event: error\ndata: " + orjson.dumps(TOOL_USE_FAILED) + b"\n\n"
    )
    out = repair_stream(body, {"messages": []})
    assert b"tool_calls" not in out and finishes(out) == []
    assert out.endswith(b"event: error\ndata: " + orjson.dumps(TOOL_USE_FAILED) + b"\n\n")


def test_what_the_upstream_sends_after_its_error_passes_untouched() -> None:
    error = sse(TOOL_USE_FAILED)
    late = sse(chunk({"role": "assistant", "content": "x"}, "stop"))
    out = repair_stream(sse(chunk({"role": "assistant", "content": "a"})) + error + late)
    assert out.endswith(error + late)  # the repeated role stays, no [DONE] is added


def test_a_null_error_field_is_not_an_error() -> None:
    body = sse({**chunk({"role": "assistant", "content": "a"}, "stop"), "error": None}, "[DONE]")
    out = repair_stream(body)
    assert out == body


# ── end to end: the real proxy, raw bytes, metrics and real clients ──────────


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running_fake_upstream() as (_, root):
        yield f"{root}/v1"


@pytest.fixture(scope="module")
def proxy(upstream: str) -> Iterator[str]:
    with running_proxy(upstream) as url:
        yield url


def streamed(base_url: str, name: str) -> bytes:
    body = {"model": name, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    with httpx.stream(
        "POST",
        f"{base_url}/chat/completions",
        json=body,
        headers={"authorization": "Bearer test-key"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        return b"".join(response.iter_raw())


def upstream_errors(proxy: str) -> float:
    text = httpx.get(f"{proxy}/metrics", timeout=10).text
    match = re.search(
        r'^streamfix_repairs_total\{kind="upstream_error_event",route="default"\} (\S+)$',
        text,
        re.M,
    )
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("name", ERROR_CASES)
def test_through_the_proxy_the_stream_ends_as_the_upstream_ended_it(
    proxy: str, upstream: str, name: str
) -> None:
    before = upstream_errors(proxy)
    out = streamed(f"{proxy}/v1", name)
    direct = streamed(upstream, name)
    assert finishes(out) == finishes(direct) == []
    error_event = direct.rindex(b"data: ", 0, direct.rindex(b'"error"'))
    assert out.endswith(direct[error_event:])  # the error event and whatever followed it
    assert upstream_errors(proxy) == before + 1


@pytest.mark.parametrize("name", ERROR_CASES)
def test_openai_sdk_raises_the_upstreams_error(proxy: str, name: str) -> None:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="test-key", max_retries=0, timeout=30)
    want = load_transcript(name).meta["expect"]["error"]
    stream = client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "go"}], stream=True
    )
    with pytest.raises(openai.APIError) as raised, stream:
        for _ in stream:
            pass
    assert raised.value.body == want


@pytest.mark.parametrize("sdk", sorted(SDK_VERSIONS))
@pytest.mark.parametrize("name", ERROR_CASES)
def test_vercel_ai_sdk_sees_the_same_error_as_directly(
    proxy: str, upstream: str, name: str, sdk: str
) -> None:
    through = run_vercel(sdk, f"{proxy}/v1", name, [])
    direct = run_vercel(sdk, upstream, name, [])
    assert through == direct
    assert through["finishReason"] != "stop"
    if sdk != "v1":  # ai 5 reads OpenRouter's error chunk as a chunk with no finish
        assert through["finishReason"] == "error" and through["errors"]
