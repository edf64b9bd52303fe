"""Issue 26, part 3: a `</think>` no opener preceded teaches `think_opened_by_template`.

A fake upstream on a plain loopback host whose chat template opens the block streams
`reasoning</think>answer`. Through the real proxy with the key left "auto": the first answer's
content stays as it came (counted `reasoning_close_unopened`), the answer ends learned
(`think_opened_by_template_learned`), and the next request's answer has the reasoning in
`reasoning_content`. A route that set the key false never learns it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.proxies import running_proxy
from tests.support.servers import serve_in_thread

REASONING = "The user asks about Paris."
ANSWER = "It is sunny in Paris."
PIECES = [REASONING[:10], REASONING[10:], "</think>", "\n\n", ANSWER]
TEXT = "".join(PIECES)


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-t",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "local-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def streamed() -> AsyncIterator[bytes]:
    yield chunk({"role": "assistant", "content": ""})
    for piece in PIECES:
        yield chunk({"content": piece})
    yield chunk({}, "stop")
    yield b"data: [DONE]\n\n"


async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    if body.get("stream"):
        return StreamingResponse(streamed(), media_type="text/event-stream")
    message = {"role": "assistant", "content": TEXT}
    return JSONResponse(
        {
            "id": "chatcmpl-t",
            "object": "chat.completion",
            "created": 1,
            "model": "local-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


@contextmanager
def proxied(**values: Any) -> Iterator[str]:
    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with serve_in_thread(app) as upstream, running_proxy(f"{upstream}/v1", **values) as proxy:
        yield proxy


def ask(proxy: str, stream: bool) -> tuple[dict[str, str], str]:
    """The answer's content and reasoning, and the repairs header."""
    request = {"model": "local-model", "messages": [{"role": "user", "content": "hi"}]}
    request["stream"] = stream
    response = httpx.post(f"{proxy}/v1/chat/completions", json=request, timeout=10)
    assert response.status_code == 200
    said = {"content": "", "reasoning_content": ""}
    if stream:
        for line in response.text.splitlines():
            if line.startswith("data: {"):
                for choice in orjson.loads(line[6:])["choices"]:
                    for field in said:
                        said[field] += choice.get("delta", {}).get(field) or ""
    else:
        message = response.json()["choices"][0]["message"]
        for field in said:
            said[field] = message.get(field) or ""
    return said, response.headers.get("x-streamfix-repairs", "")


def wait_learned(proxy: str) -> None:
    """The first exchange remembers at its end: after the client read it, so wait for it."""
    for _ in range(100):
        metrics = httpx.get(f"{proxy}/metrics", timeout=5).text
        if "think_opened_by_template_learned" in metrics:
            return
        time.sleep(0.05)
    raise AssertionError("never learned")


@pytest.mark.parametrize("stream", [True, False])
def test_an_unopened_close_is_learned_and_the_next_answer_is_split(stream: bool) -> None:
    with proxied() as proxy:
        first, repairs = ask(proxy, stream)
        assert first == {"content": TEXT, "reasoning_content": ""}
        if not stream:  # a stream's header leaves before its counts
            assert "reasoning_close_unopened" in repairs
        wait_learned(proxy)
        second, repairs = ask(proxy, stream)
        assert second["reasoning_content"] == REASONING
        assert second["content"].strip() == ANSWER
        if not stream:
            assert "reasoning_from_text" in repairs and "reasoning_close_unopened" not in repairs


@pytest.mark.parametrize("stream", [True, False])
def test_an_explicit_false_never_learns(stream: bool) -> None:
    with proxied(**{"upstream.think_opened_by_template": False}) as proxy:
        for _ in range(2):
            said, repairs = ask(proxy, stream)
            assert said == {"content": TEXT, "reasoning_content": ""}
            assert stream or "reasoning_close_unopened" in repairs
        assert "think_opened_by_template_learned" not in httpx.get(f"{proxy}/metrics").text


def ask_front(proxy: str, front: str, stream: bool) -> dict[str, str]:
    """The answer's text and reasoning as the Responses or Messages client reads them."""
    said = {"content": "", "reasoning_content": ""}
    if front == "responses":
        request: dict[str, Any] = {"model": "local-model", "input": "hi", "stream": stream}
    else:
        messages = [{"role": "user", "content": "hi"}]
        request = {"model": "local-model", "max_tokens": 100, "messages": messages}
        request["stream"] = stream
    response = httpx.post(f"{proxy}/v1/{front}", json=request, timeout=10)
    assert response.status_code == 200, response.text
    if not stream:
        body = response.json()
        blocks = body["content"] if front == "messages" else body["output"]
        for block in blocks:
            if block["type"] in ("text", "message"):
                parts = [block] if front == "messages" else block["content"]
                said["content"] += "".join(part["text"] for part in parts)
            elif block["type"] == "thinking":
                said["reasoning_content"] += block["thinking"]
            elif block["type"] == "reasoning":
                said["reasoning_content"] += "".join(s["text"] for s in block["summary"])
        return said
    fields = {
        "response.output_text.delta": "content",
        "response.reasoning_summary_text.delta": "reasoning_content",
        "text_delta": "content",
        "thinking_delta": "reasoning_content",
    }
    for line in response.text.splitlines():
        if not line.startswith("data: {"):
            continue
        event = orjson.loads(line[6:])
        delta = event.get("delta")
        kind = delta.get("type") if isinstance(delta, dict) else event["type"]
        if kind in fields:
            said[fields[kind]] += (
                delta["text"]
                if kind == "text_delta"
                else (delta["thinking"] if kind == "thinking_delta" else delta)
            )
    return said


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("front", ["responses", "messages"])
def test_the_fronts_learn_it_from_an_answer_too(front: str, stream: bool) -> None:
    """The fronts' runner ends an answer the way the chat door does: with what it taught."""
    with proxied() as proxy:
        first = ask_front(proxy, front, stream)
        assert first == {"content": TEXT, "reasoning_content": ""}
        wait_learned(proxy)
        second = ask_front(proxy, front, stream)
        assert second["reasoning_content"] == REASONING
        assert second["content"].strip() == ANSWER
