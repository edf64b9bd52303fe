"""A thinking model on a server with neither a reasoning nor a tool parser: its answer is
`<think>…</think><tool_call>…</tool_call>` as content. Through the real proxy the OpenAI SDK
gets the reasoning and a real call; the client rebuilds the assistant message the way most apps
store it (the call, no reasoning field) and sends the tool result; the upstream then receives
the call in the form its chat template renders, with the reasoning back on that turn."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.proxies import running_proxy
from tests.support.servers import serve_in_thread

THOUGHT = "The user wants the weather; call the tool."
MARKUP = (
    f"<think>{THOUGHT}</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-h",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwen3-8b",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


class TemplateServer:
    """Answers turn one with the markup as text (cut every 6 characters) and turn two with
    text, keeping every request it received."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        if body["messages"][-1]["role"] == "tool":
            return JSONResponse(
                {
                    "id": "chatcmpl-h2",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "qwen3-8b",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "Sunny in Paris."},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )

        async def stream() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            for start in range(0, len(MARKUP), 6):
                yield chunk({"content": MARKUP[start : start + 6]})
            yield chunk({}, "stop")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


def test_the_follow_up_carries_the_call_and_the_reasoning_back() -> None:
    server = TemplateServer()
    app = Starlette(routes=[Route("/v1/chat/completions", server.chat, methods=["POST"])])
    with serve_in_thread(app) as upstream, running_proxy(f"{upstream}/v1") as proxy:
        client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-tenant-a", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        reasoning, calls, finish = "", {}, None
        for event in client.chat.completions.create(
            model="qwen3-8b", messages=messages, tools=TOOLS, stream=True
        ):
            for choice in event.choices:
                delta = choice.delta
                reasoning += getattr(delta, "reasoning_content", None) or ""
                assert not delta.content  # neither the think block nor the markup
                for entry in delta.tool_calls or ():
                    call = calls.setdefault(entry.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += entry.id or ""
                    call["name"] += entry.function.name or ""
                    call["arguments"] += entry.function.arguments or ""
                finish = choice.finish_reason or finish
        assert reasoning == THOUGHT and finish == "tool_calls"
        [call] = calls.values()
        assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
        # The app stores the turn as most do: the call, no reasoning field.
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": call["arguments"]},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"})
        answer = client.chat.completions.create(model="qwen3-8b", messages=messages, tools=TOOLS)
        assert answer.choices[0].message.content == "Sunny in Paris."
    turn = server.requests[1]["messages"][1]
    assert turn["tool_calls"][0]["id"] == call["id"]
    assert turn["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(turn["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert turn["reasoning_content"] == THOUGHT
    assert server.requests[1]["messages"][2]["tool_call_id"] == call["id"]
