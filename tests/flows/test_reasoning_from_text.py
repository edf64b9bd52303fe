"""Reasoning written as `<think>…</think>` content (a QwQ/DeepSeek-R1 distill on a server run
without its reasoning parser), through the real proxy under uvicorn, read by the OpenAI Python
SDK: the reasoning arrives as `reasoning_content` (or the route's field) deltas while it
streams, the answer as content, and the repair is counted where an operator looks. With
`text_reasoning = false` the same stream reaches the client as written, which is what every
client showed before the repair."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.proxies import running_proxy
from tests.support.reasoning_flows import wait_for_repairs_total
from tests.support.servers import serve_in_thread

REASONING = "The user asks about Paris.\nIt is sunny there today."
ANSWER = "It is sunny in Paris."
# Cut inside both tags, as a tokenizer's pieces or a gateway's re-chunking may.
PIECES = ["<thi", "nk>The user", " asks about Paris.\n", "It is sunny there today.</th", "ink>\n\n"]
PIECES += ["It is", " sunny in Paris."]
TEXT = "".join(PIECES)
assert f"<think>{REASONING}</think>\n\n{ANSWER}" == TEXT


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-r1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwq-32b",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def streamed() -> AsyncIterator[bytes]:
    """One write per event, so the proxy receives the pieces as separate reads."""
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
            "id": "chatcmpl-r1",
            "object": "chat.completion",
            "created": 1,
            "model": "qwq-32b",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


@contextmanager
def proxied(**values: Any) -> Iterator[str]:
    """The proxy's root URL, in front of the upstream above."""
    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with serve_in_thread(app) as upstream, running_proxy(f"{upstream}/v1", **values) as proxy:
        yield proxy


def client(proxy: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/v1", api_key="k", max_retries=0, timeout=30)


REQUEST = {"model": "qwq-32b", "messages": [{"role": "user", "content": "Weather in Paris?"}]}


def read_stream(proxy: str, field: str) -> tuple[list[str], list[str]]:
    """The reasoning deltas and the content deltas the SDK hands the application."""
    reasoning: list[str] = []
    content: list[str] = []
    for item in client(proxy).chat.completions.create(**REQUEST, stream=True):
        for choice in item.choices:
            extra = choice.delta.model_extra or {}
            if extra.get(field):
                reasoning.append(extra[field])
            if choice.delta.content:
                content.append(choice.delta.content)
    return reasoning, content


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_the_sdk_streams_the_reasoning_in_its_field_and_the_answer_as_content(field: str) -> None:
    with proxied(**{"upstream.reasoning_field": field}) as proxy:
        reasoning, content = read_stream(proxy, field)
        assert "".join(reasoning) == REASONING
        assert len(reasoning) >= 3  # streamed as it arrived, not gathered at the end
        assert "".join(content) == ANSWER
        assert wait_for_repairs_total(proxy, "reasoning_from_text", 1) == 1


def test_the_stream_shows_the_repair_in_its_debug_comment() -> None:
    with proxied() as proxy:
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json={**REQUEST, "stream": True},
            headers={"x-streamfix-debug": "1"},
            timeout=30,
        )
    [listing] = re.findall(rb"^: streamfix-repairs (.*)$", response.content, re.M)
    assert b"reasoning_from_text:1" in listing.split(b",")


def test_a_completion_carries_the_reasoning_and_the_header_says_so() -> None:
    with proxied() as proxy:
        raw = client(proxy).chat.completions.with_raw_response.create(**REQUEST)
        completion = raw.parse()
    assert "reasoning_from_text:1" in raw.headers["x-streamfix-repairs"].split(",")
    message = completion.choices[0].message
    assert message.content == ANSWER
    assert (message.model_extra or {}).get("reasoning_content") == REASONING


def test_with_text_reasoning_off_the_client_gets_the_tags_as_written() -> None:
    with proxied(**{"upstream.text_reasoning": False}) as proxy:
        reasoning, content = read_stream(proxy, "reasoning_content")
    assert reasoning == []
    assert "".join(content) == TEXT
