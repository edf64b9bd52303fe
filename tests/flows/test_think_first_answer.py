"""The first answer of a fresh upstream and model whose chat template opens `<think>`: only
`reasoning</think>answer` arrives, and nothing has taught the proxy yet. Its hold of the leading
text (UNOPENED_CLOSE_HOLD characters) sees the `</think>`, so the real OpenAI and Anthropic
SDKs get the reasoning as reasoning in that first answer, not `</think>` in the text. A plain
answer from the same kind of upstream reaches the client with the same text, only its first
characters later."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.repair.markup.reasoning import UNOPENED_CLOSE_HOLD
from tests.support.proxies import running_proxy
from tests.support.servers import serve_in_thread

REASONING = "The user asks about Paris; it is sunny there."
ANSWER = "It is sunny in Paris."
THINKING = [REASONING[:9], REASONING[9:30], REASONING[30:], "</think>", "\n\n", ANSWER]
PLAIN = [
    "Paris is sunny today, ",
    "with a light breeze from the west ",
    "and a high of 24 degrees; <b>no rain</b> ",
    "is expected before the evening, ",
    "when clouds come in from the Atlantic.\n",
    "Tomorrow looks the same.",
]
assert len("".join(PLAIN)) > UNOPENED_CLOSE_HOLD


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-t",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwen3-thinking",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


class TemplateThinkingUpstream:
    """vLLM serving a model whose chat template writes `<think>` into the prompt, started
    without a reasoning parser: the answer's content has the reasoning and `</think>` only."""

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = pieces

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        if body.get("stream"):
            return StreamingResponse(self._streamed(), media_type="text/event-stream")
        message = {"role": "assistant", "content": "".join(self.pieces)}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25}
        return JSONResponse(
            {
                "id": "chatcmpl-t",
                "object": "chat.completion",
                "created": 1,
                "model": "qwen3-thinking",
                "choices": [choice],
                "usage": usage,
            }
        )

    async def _streamed(self) -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": ""})
        for piece in self.pieces:
            yield chunk({"content": piece})
        yield chunk({}, "stop")
        yield b"data: [DONE]\n\n"


@contextmanager
def proxied(pieces: Sequence[str]) -> Iterator[str]:
    upstream = TemplateThinkingUpstream(pieces)
    app = Starlette(routes=[Route("/v1/chat/completions", upstream.chat, methods=["POST"])])
    with serve_in_thread(app) as url, running_proxy(f"{url}/v1") as proxy:
        yield proxy


def chat_answer(proxy: str, stream: bool) -> tuple[str, str]:
    """(reasoning, content) as openai-python reads them, on the first request."""
    sdk = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0, timeout=30)
    messages: Any = [{"role": "user", "content": "weather in Paris?"}]
    if not stream:
        message = sdk.chat.completions.create(model="qwen3-thinking", messages=messages)
        said = message.choices[0].message
        return str((said.model_extra or {}).get("reasoning_content") or ""), said.content or ""
    reasoning, content = "", ""
    for event in sdk.chat.completions.create(
        model="qwen3-thinking", messages=messages, stream=True
    ):
        for choice in event.choices:
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            content += choice.delta.content or ""
    return reasoning, content


def messages_answer(proxy: str, stream: bool) -> tuple[str, str]:
    """(thinking, text) as anthropic-python reads them, on the first request."""
    claude = anthropic.Anthropic(base_url=proxy, api_key="sk-test", max_retries=0, timeout=30)
    request: Any = {
        "model": "qwen3-thinking",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "weather in Paris?"}],
    }
    if stream:
        with claude.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(**request)
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    text = "".join(b.text for b in message.content if b.type == "text")
    return thinking, text


DOORS = {"chat": chat_answer, "messages": messages_answer}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_the_first_answer_has_its_reasoning_as_reasoning(door: str, stream: bool) -> None:
    with proxied(THINKING) as proxy:
        reasoning, content = DOORS[door](proxy, stream)
    assert reasoning == REASONING
    assert content == ANSWER
    assert "</think>" not in content


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_plain_answer_keeps_every_character(door: str, stream: bool) -> None:
    with proxied(PLAIN) as proxy:
        reasoning, content = DOORS[door](proxy, stream)
    assert reasoning == ""
    assert content == "".join(PLAIN)


def test_a_plain_streamed_answer_is_held_only_until_the_bound() -> None:
    """Raw chat stream: the first content event carries the pieces held until the bound was
    passed, and every later piece goes out as its own event, unchanged."""
    with proxied(PLAIN) as proxy:
        request = {
            "model": "qwen3-thinking",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        }
        response = httpx.post(f"{proxy}/v1/chat/completions", json=request, timeout=10)
    pieces = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in orjson.loads(line[6:])["choices"]:
                if choice.get("delta", {}).get("content"):
                    pieces.append(choice["delta"]["content"])
    held = next(k for k in range(1, len(PLAIN) + 1) if len("".join(PLAIN[:k])) >= 128)
    assert UNOPENED_CLOSE_HOLD == 128
    assert pieces == ["".join(PLAIN[:held]), *PLAIN[held:]]
