"""A front client that asked for one answer gets one answer when the upstream streams anyway:
the repaired stream folded into the completion it says (proxy/repair/stream_fold.py), rendered
as the front's whole body. Here the stream is Gemini's: a call without index, split in two,
ending with `stop`; the client gets the call whole and the finish as a call's."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson

from proxy.server.app import create_app
from proxy.settings.schema import Settings

TOOLS_RESPONSES = [
    {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}
]
TOOLS_MESSAGES = [{"name": "read", "input_schema": {"type": "object", "properties": {}}}]
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


GEMINI_STREAM = [
    chunk({"role": "assistant", "content": "Reading."}),
    chunk(
        {
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"pa'},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"function": {"arguments": 'th": "a.txt"}'}}]}),
    chunk({}, "stop", usage=USAGE),
    b"data: [DONE]\n\n",
]


def post(path: str, body: dict[str, Any], parts: list[bytes], **headers: str) -> httpx.Response:
    sent: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(orjson.loads(request.content))
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"".join(parts)
        )

    settings = Settings().with_values(
        {"upstream.base_url": "http://up.test/v1", "repairs.strict": True}
    )
    app = create_app(settings, transport=httpx.MockTransport(upstream))

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            return await client.post(path, json=body, headers=headers)

    response = asyncio.run(run())
    assert sent and not sent[0].get("stream")  # the client's choice went up as it was
    return response


def test_a_responses_client_asking_for_one_answer_gets_the_folded_stream() -> None:
    body = {"model": "m", "input": "read it", "tools": TOOLS_RESPONSES, "stream": False}
    response = post("/v1/responses", body, GEMINI_STREAM, authorization="Bearer sk-test")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    assert answer["status"] == "completed"
    kinds = [item["type"] for item in answer["output"]]
    assert kinds == ["message", "function_call"]
    (call,) = [item for item in answer["output"] if item["type"] == "function_call"]
    assert (call["name"], orjson.loads(call["arguments"])) == ("read", {"path": "a.txt"})
    assert answer["usage"]["input_tokens"] == 7
    assert "stream_folded:1" in response.headers["x-streamfix-repairs"]


def test_a_messages_client_asking_for_one_answer_gets_the_folded_stream() -> None:
    body = {
        "model": "m",
        "max_tokens": 64,
        "tools": TOOLS_MESSAGES,
        "messages": [{"role": "user", "content": "read it"}],
    }
    headers = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
    response = post("/v1/messages", body, GEMINI_STREAM, **headers)
    assert response.status_code == 200
    message = response.json()
    assert message["type"] == "message"
    assert message["stop_reason"] == "tool_use"  # Gemini's `stop` after a call, repaired
    blocks = [(block["type"], block.get("input")) for block in message["content"]]
    assert blocks == [("text", None), ("tool_use", {"path": "a.txt"})]
    assert message["usage"]["output_tokens"] == 3


def test_an_error_event_in_the_stream_is_the_fronts_error() -> None:
    error = b'event: error\ndata: {"error": {"message": "overloaded", "code": 503}}\n\n'
    body = {"model": "m", "input": "hi", "stream": False}
    response = post(
        "/v1/responses", body, [chunk({"content": "Hel"}), error], authorization="Bearer sk-test"
    )
    assert response.status_code == 502
    assert "overloaded" in response.json()["error"]["message"]


def test_a_stream_that_carried_no_answer_is_a_502() -> None:
    body = {"model": "m", "input": "hi", "stream": False}
    response = post(
        "/v1/responses", body, [b": just a comment\n\n"], authorization="Bearer sk-test"
    )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_no_events"
