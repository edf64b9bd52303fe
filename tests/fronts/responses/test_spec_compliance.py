"""The Open Responses compliance templates (the spec's suite: text, streaming, system prompt,
tool calls streamed and not, a function-call round trip, image input, file input, multi-turn,
`previous_response_id`) against the door on a scripted chat upstream: every response object
and every event validated against the spec's schemas (spec_schemas.py), and each template's
own checks on what came back and what went upstream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.fronts.responses.events_support import USAGE, call, delta
from tests.fronts.responses.spec_schemas import check_event, check_response
from tests.support.part_upstreams import vllm_file_parts

KEY = {"authorization": "Bearer sk-a"}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQ"
    "DwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = "data:application/pdf;base64,JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDM+PgplbmRvYmoK"


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": USAGE,
    }


@dataclass
class Upstream:
    """Answers each chat request with the next scripted answer (streamed when asked), or with
    what `refuse` says a real upstream refuses; keeps what it was sent."""

    text: str = "Hello there friend."
    calls: list[dict[str, Any]] = field(default_factory=list)
    refuse: Callable[[dict[str, Any], bytes], Any] | None = None
    seen: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self.seen.append(body)
        refused = self.refuse(body, request.content) if self.refuse else None
        if refused is not None:
            status, headers, content = refused
            return httpx.Response(status, headers={"content-type": headers}, content=content)
        if body.get("stream"):
            chunks = (
                [delta(tool_calls=[call(i, **c)]) for i, c in enumerate(self.calls)]
                if self.calls
                else [delta(content=self.text)]
            )
            finish = "tool_calls" if self.calls else "stop"
            parts = _sse(*chunks, delta(finish=finish, usage=USAGE))
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=parts)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if self.calls else self.text,
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in self.calls
            ]
        return httpx.Response(
            200, json=_completion(message, "tool_calls" if self.calls else "stop")
        )


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    return [
        orjson.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]


def exchange(upstream: Upstream, *bodies: dict[str, Any]) -> list[httpx.Response]:
    """The bodies in turn against one proxy (a later one may name an earlier response's id
    with `"previous_response_id": "<previous>"`); every answer checked against the schemas."""
    settings = Settings().with_values({"upstream.base_url": "http://up.test/v1"})
    app = create_app(settings, transport=httpx.MockTransport(upstream))

    async def run() -> list[httpx.Response]:
        out: list[httpx.Response] = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            for body in bodies:
                if body.get("previous_response_id") == "<previous>":
                    body = {**body, "previous_response_id": response_of(out[-1])["id"]}
                out.append(await client.post("/v1/responses", json=body, headers=KEY))
        return out

    answers = asyncio.run(run())
    for answer in answers:
        if answer.status_code == 200:
            if answer.headers["content-type"].startswith("text/event-stream"):
                events = _events(answer)
                assert [e["sequence_number"] for e in events] == list(range(len(events)))
                for event in events:
                    check_event(event)
            else:
                check_response(answer.json())
    return answers


def response_of(answer: httpx.Response) -> dict[str, Any]:
    """The final response object: the body, or the terminal event's."""
    if answer.headers["content-type"].startswith("text/event-stream"):
        return dict(_events(answer)[-1]["response"])
    return dict(answer.json())


def _user(content: Any) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": content}


def test_basic_text_response() -> None:
    (answer,) = exchange(
        Upstream(), {"model": "m", "input": [_user("Say hello in exactly 3 words.")]}
    )
    response = response_of(answer)
    assert response["status"] == "completed"
    assert response["completed_at"] >= response["created_at"]
    assert response["output"][0]["content"][0]["text"] == "Hello there friend."


def test_streaming_response() -> None:
    (answer,) = exchange(
        Upstream(), {"model": "m", "input": [_user("Count to 3.")], "stream": True}
    )
    events = _events(answer)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert events[0]["response"]["completed_at"] is None
    assert events[-1]["response"]["completed_at"] is not None


def test_system_prompt() -> None:
    upstream = Upstream()
    body = {
        "model": "m",
        "input": [
            {"type": "message", "role": "system", "content": "You are a pirate."},
            _user("Say hello."),
        ],
    }
    exchange(upstream, body)
    assert upstream.seen[0]["messages"][0] == {"role": "system", "content": "You are a pirate."}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calling(stream: bool) -> None:
    upstream = Upstream(
        calls=[{"id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}]
    )
    body = {
        "model": "m",
        "input": [_user("Weather in Paris?")],
        "tools": [WEATHER],
        "stream": stream,
    }
    (answer,) = exchange(upstream, body)
    response = response_of(answer)
    (item,) = response["output"]
    assert (item["type"], item["name"], item["arguments"]) == (
        "function_call",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert response["tools"][0]["strict"] is None  # the request said nothing of it
    assert "strict" not in upstream.seen[0]["tools"][0]["function"]


def test_an_echoed_tool_keeps_the_strict_it_was_given() -> None:
    (answer,) = exchange(
        Upstream(), {"model": "m", "input": "hi", "tools": [{**WEATHER, "strict": True}]}
    )
    assert response_of(answer)["tools"][0]["strict"] is True


def test_function_call_round_trip() -> None:
    upstream = Upstream(text="It is sunny in Paris.")
    body = {
        "model": "m",
        "tools": [WEATHER],
        "input": [
            _user("Weather in Paris?"),
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": '{"sky":"sunny"}'},
        ],
    }
    (answer,) = exchange(upstream, body)
    assert response_of(answer)["output"][0]["content"][0]["text"] == "It is sunny in Paris."
    tool = upstream.seen[0]["messages"][-1]
    assert (tool["role"], tool["tool_call_id"], tool["content"]) == (
        "tool",
        "call_1",
        '{"sky":"sunny"}',
    )


def test_image_input() -> None:
    upstream = Upstream()
    content = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": PIXEL},
    ]
    exchange(upstream, {"model": "m", "input": [_user(content)]})
    assert upstream.seen[0]["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": PIXEL},
    }


@pytest.mark.parametrize(
    ("part", "file"),
    [
        ({"filename": "a.pdf", "file_data": PDF}, {"filename": "a.pdf", "file_data": PDF}),
        ({"file_url": "https://example.test/a.pdf"}, {"file_data": "https://example.test/a.pdf"}),
        ({"file_id": "file-123"}, {"file_id": "file-123"}),
    ],
)
def test_file_input(part: dict[str, Any], file: dict[str, Any]) -> None:
    upstream = Upstream()
    content = [{"type": "input_text", "text": "Summarise."}, {"type": "input_file", **part}]
    (answer,) = exchange(upstream, {"model": "m", "input": [_user(content)]})
    assert answer.status_code == 200
    assert upstream.seen[0]["messages"][0]["content"][1] == {"type": "file", "file": file}


def test_a_file_an_upstream_refuses_is_a_400_naming_the_part_and_learned() -> None:
    upstream = Upstream(refuse=vllm_file_parts)
    content = [
        {"type": "input_text", "text": "Summarise."},
        {"type": "input_file", "file_data": PDF},
    ]
    body = {"model": "m", "input": [_user(content)]}
    first, again = exchange(upstream, body, body)
    assert first.status_code == again.status_code == 400
    for answer in (first, again):
        message = answer.json()["error"]["message"]
        assert "input[0].content[1]" in message and "input_file" in message
    assert len(upstream.seen) == 1  # learned: the second never went up


def test_an_input_file_without_its_file_is_refused() -> None:
    upstream = Upstream()
    content = [{"type": "input_file", "filename": "a.pdf"}]
    (answer,) = exchange(upstream, {"model": "m", "input": [_user(content)]})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "input[0].content[0]"
    assert not upstream.seen


def test_multi_turn() -> None:
    upstream = Upstream(text="Your name is Ada.")
    body = {
        "model": "m",
        "input": [
            _user("My name is Ada."),
            {"type": "message", "role": "assistant", "content": "Nice to meet you, Ada."},
            _user("What is my name?"),
        ],
    }
    exchange(upstream, body)
    assert [m["role"] for m in upstream.seen[0]["messages"]] == ["user", "assistant", "user"]


def test_previous_response_id() -> None:
    upstream = Upstream(text="Noted.")
    first = {"model": "m", "input": [_user("My name is Ada.")]}
    second = {
        "model": "m",
        "input": [_user("What is my name?")],
        "previous_response_id": "<previous>",
    }
    earlier, answer = exchange(upstream, first, second)
    assert response_of(answer)["previous_response_id"] == response_of(earlier)["id"]
    contents = [m["content"] for m in upstream.seen[1]["messages"]]
    assert contents == ["My name is Ada.", "Noted.", "What is my name?"]


def test_the_request_s_parameters_are_echoed() -> None:
    body = {
        "model": "m",
        "input": "hi",
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "top_logprobs": 2,
        "max_tool_calls": 3,
        "service_tier": "flex",
        "safety_identifier": "user-1",
        "prompt_cache_key": "k",
        "temperature": None,
    }
    (answer,) = exchange(Upstream(), body)
    response = response_of(answer)
    echoed = {
        name: response[name] for name in body if name not in ("model", "input", "temperature")
    }
    assert echoed == {name: body[name] for name in echoed}
    assert response["temperature"] == 1.0
