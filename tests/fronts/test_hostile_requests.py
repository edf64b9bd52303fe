"""Hostile client requests on the Responses and Messages fronts (and `count_tokens`): valid
requests with arbitrary JSON put anywhere in them, keys removed, unknown item and block kinds.
Whatever comes in, the answer is under 500, a refusal is in the front's own error shape, a 200
is a well-formed answer, no exception escapes the app (strict repairs, app exceptions raised),
and what goes upstream is JSON."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fronts.hostile import (
    MESSAGES_HEADERS,
    RESPONSES_HEADERS,
    VALUES,
    anthropic_error_problem,
    check_messages_answer,
    check_responses_answer,
    encoded,
    exchange,
    mutated,
    typed_items,
)

BOUNDED = settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 200)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

RESPONSES_BASE: dict[str, Any] = {
    "model": "m",
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "ok"},
                {"type": "refusal", "refusal": "no"},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "sf1.x.y"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** P"},
        {
            "type": "function_call",
            "call_id": "c3",
            "name": "search",
            "namespace": "docs",
            "arguments": {"q": 1},
        },
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {
            "type": "custom_tool_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "done"}],
        },
        {"type": "function_call_output", "call_id": "c3", "output": {"hits": 0}},
    ],
    "tools": [
        {
            "type": "function",
            "name": "get_weather",
            "description": "w",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": True,
        },
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "patch",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
        },
        {
            "type": "namespace",
            "name": "docs",
            "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}],
        },
        {"type": "web_search", "external_web_access": False},
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "max_output_tokens": 100,
    "reasoning": {"effort": "low", "summary": "auto"},
    "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}}},
    "temperature": 0.5,
    "top_p": 1,
    "store": False,
    "stream": True,
    "metadata": {"k": "v"},
    "include": ["reasoning.encrypted_content"],
}
ITEM_REFERENCE = {"type": "item_reference", "id": "msg_never_issued"}
"""Refused (no such item is stored): an id to mutate."""
TOOL_CHOICES = [
    "auto",
    "required",
    {"type": "function", "name": "get_weather"},
    {"type": "custom", "name": "apply_patch"},
    {"type": "function", "name": "search", "namespace": "docs"},
    {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "search"}]},
]
RESPONSES_KEYS = [
    "type",
    "role",
    "content",
    "id",
    "call_id",
    "name",
    "namespace",
    "arguments",
    "input",
    "output",
    "tools",
    "functions",
    "format",
    "encrypted_content",
    "previous_response_id",
    "background",
    "conversation",
    "prompt",
    "tool_choice",
    "text",
    "reasoning",
    "effort",
    "max_output_tokens",
    "image_url",
    "file_id",
    "detail",
    "stream",
    "store",
    "mode",
]
RESPONSES_ITEMS = typed_items(
    [
        "message",
        "function_call",
        "custom_tool_call",
        "function_call_output",
        "custom_tool_call_output",
        "reasoning",
        "item_reference",
        "web_search_call",
        "function",
        "custom",
        "namespace",
        "web_search",
        "input_text",
        "input_image",
        "output_text",
        "refusal",
        "summary_text",
    ],
    RESPONSES_KEYS,
    ["user", "assistant", "developer", "c1", "c2", "get_weather", "apply_patch", "docs", "hi", []],
)

MESSAGES_BASE: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 100,
    "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sf1.x.y"},
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"c": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "sunny"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                        },
                    ],
                    "is_error": False,
                },
                {"type": "text", "text": "and?"},
                {"type": "image", "source": {"type": "url", "url": "http://x.test/y.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "redacted_thinking", "data": "xx"}, {"type": "text", "text": "d"}],
        },
        {"role": "system", "content": "inner system"},
        {"role": "user", "content": "again"},
    ],
    "tools": [
        {
            "name": "get_weather",
            "description": "w",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {"type": "custom", "name": "mcp__server__tool", "input_schema": {"type": "object"}},
    ],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "stop_sequences": ["END"],
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "metadata": {"user_id": "u1"},
    "output_config": {"effort": "low"},
    "stream": True,
}
MESSAGE_TOOL_CHOICES = [
    {"type": "auto"},
    {"type": "any"},
    {"type": "none"},
    {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
]
THINKING = [
    {"type": "enabled", "budget_tokens": 2048},
    {"type": "adaptive"},
    {"type": "disabled"},
]
MESSAGES_KEYS = [
    "type",
    "role",
    "content",
    "text",
    "id",
    "name",
    "input",
    "tool_use_id",
    "is_error",
    "source",
    "media_type",
    "data",
    "url",
    "signature",
    "thinking",
    "budget_tokens",
    "system",
    "tools",
    "input_schema",
    "tool_choice",
    "stop_sequences",
    "output_config",
    "output_format",
    "format",
    "schema",
    "effort",
    "metadata",
    "user_id",
    "mcp_servers",
    "max_tokens",
    "stream",
    "disable_parallel_tool_use",
]
MESSAGES_ITEMS = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": VALUES}),
    typed_items(
        [
            "text",
            "image",
            "tool_use",
            "tool_result",
            "thinking",
            "redacted_thinking",
            "document",
            "server_tool_use",
            "search_result",
            "base64",
            "url",
            "custom",
            "tool",
            "auto",
            "enabled",
        ],
        MESSAGES_KEYS,
        ["user", "assistant", "toolu_1", "get_weather", "hi", "image/png", "AA", "sf1.x.y", {}],
    ),
)


class ValidUpstream:
    """A chat upstream that answers every request validly (streamed when asked), after checking
    that what the proxy sent it is JSON with a list of messages: a real upstream answers 400
    to anything else, so the proxy must never send it."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        try:
            body = json.loads(request.content)
        except ValueError as exc:
            self.problems.append(f"the proxy sent non-JSON upstream: {exc}")
            return httpx.Response(400, json={"error": {"message": "bad json"}})
        if not isinstance(body.get("messages"), list):
            self.problems.append(f"the proxy sent no messages list: {body!r:.300}")
        tools = body.get("tools") or []
        name = "get_weather"
        if tools and isinstance(tools[0], dict):
            function = tools[0].get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                name = function["name"]
        call = {
            "index": 0,
            "id": "call_9",
            "type": "function",
            "function": {"name": name, "arguments": '{"input": "x"}'},
        }
        usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        if body.get("stream") is True:
            chunks = [
                {
                    "choices": [
                        {"index": 0, "delta": {"role": "assistant", "reasoning_content": "t"}}
                    ]
                },
                {"choices": [{"index": 0, "delta": {"content": "hello"}}]},
                {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                {"choices": [], "usage": usage},
            ]
            raw = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                content=raw + b"data: [DONE]\n\n",
            )
        message = {"role": "assistant", "content": "hello", "tool_calls": [call]}
        message["reasoning_content"] = "t"
        completion = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": usage,
        }
        return httpx.Response(200, json=completion)


def _some(draw: st.DrawFn, pool: list[Any], at_least: int = 0) -> list[Any]:
    """Some of `pool`, in its order: a smaller base puts each mutation nearer its target."""
    chosen = draw(st.sets(st.integers(0, len(pool) - 1), min_size=at_least, max_size=len(pool)))
    return [pool[index] for index in sorted(chosen)]


def _with_some_of(draw: st.DrawFn, base: dict[str, Any], always: set[str]) -> dict[str, Any]:
    return {key: value for key, value in base.items() if key in always or draw(st.booleans())}


def _responses_request() -> st.SearchStrategy[Any]:
    @st.composite
    def build(draw: st.DrawFn) -> Any:
        base = _with_some_of(draw, RESPONSES_BASE, {"model", "input"})
        base["input"] = _some(draw, [*RESPONSES_BASE["input"], ITEM_REFERENCE], at_least=1)
        base["tools"] = _some(draw, RESPONSES_BASE["tools"])
        base["tool_choice"] = draw(st.sampled_from(TOOL_CHOICES))
        base["stream"] = draw(st.booleans())
        base["store"] = draw(st.booleans())
        return draw(mutated(base, RESPONSES_KEYS, RESPONSES_ITEMS))

    return build()


def _messages_request() -> st.SearchStrategy[Any]:
    @st.composite
    def build(draw: st.DrawFn) -> Any:
        base = _with_some_of(draw, MESSAGES_BASE, {"model", "messages", "max_tokens"})
        base["messages"] = _some(draw, MESSAGES_BASE["messages"], at_least=1)
        base["tools"] = _some(draw, MESSAGES_BASE["tools"])
        base["tool_choice"] = draw(st.sampled_from(MESSAGE_TOOL_CHOICES))
        base["thinking"] = draw(st.sampled_from(THINKING))
        base["stream"] = draw(st.booleans())
        return draw(mutated(base, MESSAGES_KEYS, MESSAGES_ITEMS))

    return build()


def test_the_bases_are_answered() -> None:
    """The unmutated requests go through: the mutations are what the properties are about."""
    for stream in (True, False):
        upstream = ValidUpstream()
        answer = exchange(
            "/v1/responses",
            encoded({**RESPONSES_BASE, "stream": stream}),
            upstream,
            RESPONSES_HEADERS,
        )
        assert answer.status_code == 200, answer.text
        check_responses_answer(answer)
        answer = exchange(
            "/v1/messages", encoded({**MESSAGES_BASE, "stream": stream}), upstream, MESSAGES_HEADERS
        )
        assert answer.status_code == 200, answer.text
        check_messages_answer(answer)
        assert upstream.problems == []


@BOUNDED
@given(_responses_request())
def test_a_hostile_responses_request_is_answered_or_refused_in_openais_shape(body: Any) -> None:
    upstream = ValidUpstream()
    answer = exchange("/v1/responses", encoded(body), upstream, RESPONSES_HEADERS)
    check_responses_answer(answer)
    assert upstream.problems == []


@BOUNDED
@given(_messages_request())
def test_a_hostile_messages_request_is_answered_or_refused_in_anthropics_shape(body: Any) -> None:
    upstream = ValidUpstream()
    answer = exchange("/v1/messages", encoded(body), upstream, MESSAGES_HEADERS)
    check_messages_answer(answer)
    assert upstream.problems == []


@BOUNDED
@given(_messages_request())
def test_a_hostile_count_tokens_request_is_counted_or_refused_in_anthropics_shape(
    body: Any,
) -> None:
    if isinstance(body, dict):
        body.pop("max_tokens", None)  # count_tokens takes none
    upstream = ValidUpstream()
    answer = exchange("/v1/messages/count_tokens", encoded(body), upstream, MESSAGES_HEADERS)
    assert answer.status_code < 500, answer.text[:500]
    if answer.status_code >= 400:
        assert anthropic_error_problem(answer) is None, answer.text[:500]
    else:
        count = answer.json()["input_tokens"]
        assert isinstance(count, int) and count > 0
    assert upstream.problems == []
