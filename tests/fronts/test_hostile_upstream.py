"""Hostile chat upstreams behind the Responses and Messages fronts: valid front requests, answered
with chunks whose fields have the wrong types or values, non-JSON data, error events, bodies that
are not what their content type says, empty answers, errors in a 200, a stream without `[DONE]`
or cut off, HTML error pages. Whatever comes back, the client gets a well-formed answer of its
own protocol (a stream ending in its terminal event, checked by the fronts' validators) or an
error in the front's own shape; never a traceback (strict repairs, app exceptions raised), and
a 5xx only when the upstream broke (502) or said so itself."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fronts.hostile import (
    MESSAGES_HEADERS,
    RESPONSES_HEADERS,
    VALUES,
    Session,
    check_messages_answer,
    check_responses_answer,
    encoded,
    exchange,
    mutated,
    responses_events,
)
from tests.fronts.messages_checks import parse as parse_messages
from tests.fronts.test_hostile_requests import ValidUpstream

BOUNDED = settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 200)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SSE = {"content-type": "text/event-stream"}
BROKE = frozenset({502, 504})
"""What the proxy may answer when the upstream broke before its first byte."""

RESPONSES_REQUEST: dict[str, Any] = {
    "model": "m",
    "input": "weather?",
    "store": True,
    "tools": [
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
        {"type": "custom", "name": "apply_patch"},
        {"type": "namespace", "name": "docs", "tools": [{"type": "function", "name": "search"}]},
    ],
}
MESSAGES_REQUEST: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "weather?"}],
    "stop_sequences": ["END"],
    "tools": [
        {"name": "get_weather", "input_schema": {"type": "object"}},
        {"name": "apply_patch", "input_schema": {"type": "object"}},
        {"name": "docs__search", "input_schema": {"type": "object"}},
    ],
}
USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 5,
    "total_tokens": 15,
    "prompt_tokens_details": {"cached_tokens": 2},
    "completion_tokens_details": {"reasoning_tokens": 3},
}
SIGNATURE = {"google": {"thought_signature": "S"}}
CHUNKS: list[Any] = [
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "hm"}}],
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"reasoning_details": [{"type": "reasoning.text", "text": "x"}]},
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {"content": "Hello", "refusal": None}}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":'},
                            "extra_content": SIGNATURE,
                        }
                    ]
                },
            }
        ]
    },
    {
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"P"}'}}]}}
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "apply_patch", "arguments": '{"input": "x"}'},
                        },
                        {
                            "index": 2,
                            "id": "call_3",
                            "type": "function",
                            "function": {"name": "docs__search", "arguments": "{}"},
                        },
                    ]
                },
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls", "stop_reason": "END"}]},
    {"choices": [], "usage": USAGE},
]
COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Hello",
                "reasoning_content": "hm",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"P"}'},
                        "extra_content": SIGNATURE,
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "apply_patch", "arguments": '{"input": "x"}'},
                    },
                ],
            },
        }
    ],
    "usage": USAGE,
}
CHAT_KEYS = [
    "choices",
    "delta",
    "message",
    "tool_calls",
    "index",
    "id",
    "type",
    "function",
    "name",
    "arguments",
    "content",
    "refusal",
    "reasoning_content",
    "reasoning",
    "reasoning_details",
    "extra_content",
    "finish_reason",
    "stop_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
    "cached_tokens",
    "reasoning_tokens",
    "error",
    "role",
]
CHAT_VALUES = st.one_of(
    st.sampled_from(
        [
            "length",
            "content_filter",
            "stop",
            "tool_calls",
            "function_call",
            "banana",
            -1,
            2**31,
            "0",
            "{",
            '{"a":1}',
            {"error": {"message": "late"}},
        ]
    ),
    VALUES,
)


def sse(chunks: list[Any], done: bool = True) -> bytes:
    out = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks)
    return out + b"data: [DONE]\n\n" if done else out


def answering(status: int, body: bytes, headers: dict[str, str]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, content=body)

    return handler


def cut_after(body: bytes) -> Any:
    """A stream that breaks off (the connection reset) after `body`."""

    def handler(request: httpx.Request) -> httpx.Response:
        async def parts() -> AsyncIterator[bytes]:
            yield body
            raise httpx.ReadError("connection reset")

        return httpx.Response(200, headers=SSE, content=parts())

    return handler


FRONTS = [
    ("/v1/responses", RESPONSES_REQUEST, RESPONSES_HEADERS, check_responses_answer),
    ("/v1/messages", MESSAGES_REQUEST, MESSAGES_HEADERS, check_messages_answer),
]
FRONT_IDS = ["responses", "messages"]


def ask(front: int, stream: bool, upstream: Any, server_errors: frozenset[int]) -> httpx.Response:
    path, request, headers, check = FRONTS[front]
    answer = exchange(path, encoded({**request, "stream": stream}), upstream, headers)
    check(answer, server_errors)
    return answer


# ── the properties ──────────────────────────────────────────────────────────


@BOUNDED
@given(
    st.sampled_from([0, 1]),
    st.booleans(),
    mutated({"chunks": CHUNKS}, CHAT_KEYS, CHAT_VALUES),
    st.booleans(),
)
def test_hostile_chunks_end_in_a_well_formed_stream(
    front: int, stream: bool, hostile: Any, done: bool
) -> None:
    chunks = hostile.get("chunks") if isinstance(hostile, dict) else None
    chunks = chunks if isinstance(chunks, list) else [chunks]
    ask(front, stream, answering(200, sse(chunks, done), SSE), BROKE)


@BOUNDED
@given(st.sampled_from([0, 1]), st.booleans(), mutated(COMPLETION, CHAT_KEYS, CHAT_VALUES))
def test_a_hostile_whole_completion_is_an_answer_or_a_502(
    front: int, stream: bool, hostile: Any
) -> None:
    body = encoded(hostile)
    ask(front, stream, answering(200, body, {"content-type": "application/json"}), BROKE)


# ── the named cases ─────────────────────────────────────────────────────────

TEXT = {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
CASES: dict[str, tuple[int, bytes, dict[str, str]]] = {
    "non-JSON data line": (200, b"data: hello\n\n" + sse([TEXT, FINISH]), SSE),
    "broken JSON data line": (200, b'data: {"choices": [\n\n' + sse([TEXT, FINISH]), SSE),
    "data that is not an object": (200, b"data: [1, 2]\n\ndata: 7\n\n" + sse([TEXT]), SSE),
    "lone surrogate in a chunk": (200, b'data: {"choices":"\\ud800"}\n\n' + sse([TEXT]), SSE),
    "error event with JSON": (
        200,
        sse([TEXT], done=False) + b'event: error\ndata: {"error": {"message": "boom"}}\n\n',
        SSE,
    ),
    "error event, text": (200, sse([TEXT], done=False) + b"event: error\ndata: boom\n\n", SSE),
    "error event, no data": (200, b"event: error\n\n", SSE),
    "error chunk in the stream": (
        200,
        sse([TEXT, {"error": {"message": "overloaded", "code": 529}}], done=False),
        SSE,
    ),
    "error chunk with choices": (200, sse([{"error": "x", "choices": [TEXT["choices"]]}]), SSE),
    "not SSE though it says so": (200, b"Hello, I am not SSE at all\n", SSE),
    "HTML though it says SSE": (200, HTML, SSE),
    "whole JSON where a stream was asked": (200, json.dumps(COMPLETION).encode(), SSE),
    "whole JSON as JSON": (200, json.dumps(COMPLETION).encode(), {}),
    "empty 200 SSE": (200, b"", SSE),
    "empty 200 JSON": (200, b"", {"content-type": "application/json"}),
    "empty 200 no type": (200, b"", {}),
    "only DONE": (200, b"data: [DONE]\n\n", SSE),
    "200 with an error body": (
        200,
        b'{"error": {"message": "quota", "type": "insufficient_quota"}}',
        {"content-type": "application/json"},
    ),
    "200 with an error string": (200, b'{"error": "quota"}', {"content-type": "application/json"}),
    "200 JSON array": (200, b"[1, 2]", {"content-type": "application/json"}),
    "200 JSON string": (200, b'"hello"', {"content-type": "application/json"}),
    "200 choices not a list": (200, b'{"choices": 5}', {"content-type": "application/json"}),
    "200 HTML as JSON": (200, HTML, {"content-type": "application/json"}),
    "no DONE": (200, sse([TEXT, FINISH], done=False), SSE),
    "no DONE mid call": (200, sse(CHUNKS[:4], done=False), SSE),
    "429 HTML": (429, HTML, {"content-type": "text/html"}),
    "500 HTML": (500, HTML, {"content-type": "text/html"}),
    "503 HTML": (503, HTML, {"content-type": "text/html"}),
    "503 empty": (503, b"", {}),
    "400 JSON list": (400, b'[{"error": {"message": "bad", "code": 400}}]', {}),
    "401 error not an object": (401, b'{"error": ["no"]}', {}),
    "gzip that is not": (200, sse([TEXT]), {**SSE, "content-encoding": "gzip"}),
    "unknown encoding": (200, sse([TEXT]), {**SSE, "content-encoding": "br2"}),
}


def _call(**fields: Any) -> dict[str, Any]:
    call: dict[str, Any] = {
        "index": 0,
        "id": "call_h",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
    }
    given = fields.pop("function", {})
    function = {**call["function"], **given} if isinstance(given, dict) else given
    piece = {**call, **fields, "function": function}
    return {"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]}


HOSTILE_CHUNKS: dict[str, Any] = {
    "choices an object": {"choices": {"index": 0, "delta": {"content": "x"}}},
    "choices a string": {"choices": "abc"},
    "choices a number": {"choices": 5},
    "choice a string": {"choices": ["abc"]},
    "choice index huge": {"choices": [{"index": 2**70, "delta": {"content": "x"}}]},
    "choice index a string": {"choices": [{"index": "0", "delta": {"content": "x"}}]},
    "delta a string": {"choices": [{"index": 0, "delta": "hello"}]},
    "delta a list": {"choices": [{"index": 0, "delta": [{"content": "x"}]}]},
    "content a list": {"choices": [{"index": 0, "delta": {"content": [{"type": "text"}]}}]},
    "content a number": {"choices": [{"index": 0, "delta": {"content": 5}}]},
    "tool_calls an object": {
        "choices": [{"index": 0, "delta": {"tool_calls": _call()["choices"][0]["delta"]}}]
    },
    "tool_calls a string": {"choices": [{"index": 0, "delta": {"tool_calls": "get_weather"}}]},
    "call index a string": _call(index="0"),
    "call index negative": _call(index=-1),
    "call index huge": _call(index=2**64),
    "call index a float": _call(index=0.5),
    "call id a number": _call(id=7),
    "call function a string": _call(function="get_weather"),
    "name a number": _call(function={"name": 7}),
    "name an object": _call(function={"name": {"x": 1}}),
    "arguments a number": _call(function={"arguments": 5}),
    "arguments an object": _call(function={"arguments": {"city": "P"}}),
    "arguments an object with a huge integer": _call(function={"arguments": {"n": 2**70}}),
    "arguments a list": _call(function={"arguments": [1]}),
    "signature a huge integer": _call(extra_content={"google": {"thought_signature": 2**70}}),
    "reasoning_content an object": {
        "choices": [{"index": 0, "delta": {"reasoning_content": {"text": "x"}}}]
    },
    "reasoning_details an object": {
        "choices": [{"index": 0, "delta": {"reasoning_details": {"type": "reasoning.text"}}}]
    },
    "reasoning_details with a huge integer": {
        "choices": [{"index": 0, "delta": {"reasoning_details": [{"index": 2**70, "text": "x"}]}}]
    },
    "usage strings": {
        "choices": [],
        "usage": {"prompt_tokens": "10", "completion_tokens": "x", "total_tokens": None},
    },
    "usage negative": {
        "choices": [],
        "usage": {
            "prompt_tokens": -5,
            "completion_tokens": -1,
            "total_tokens": -6,
            "prompt_tokens_details": {"cached_tokens": -3},
        },
    },
    "usage details not objects": {
        "choices": [],
        "usage": {**USAGE, "prompt_tokens_details": [2], "completion_tokens_details": "3"},
    },
    "usage a list": {"choices": [], "usage": [1, 2]},
    "usage huge": {"choices": [], "usage": {"prompt_tokens": 2**70, "completion_tokens": 2**64}},
    "finish_reason unknown": {"choices": [{"index": 0, "delta": {}, "finish_reason": "banana"}]},
    "finish_reason a number": {"choices": [{"index": 0, "delta": {}, "finish_reason": 3}]},
    "finish_reason an object": {"choices": [{"index": 0, "delta": {}, "finish_reason": {}}]},
    "finish_reason length": {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
    "stop_reason an object": {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": {}}]
    },
}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("front", [0, 1], ids=FRONT_IDS)
@pytest.mark.parametrize("case", list(HOSTILE_CHUNKS))
def test_a_chunk_with_a_hostile_field(case: str, front: int, stream: bool) -> None:
    hostile = HOSTILE_CHUNKS[case]
    if case.startswith("usage"):  # the last usage is the one the answer reports
        chunks = [TEXT, FINISH, hostile]
    else:
        chunks = [TEXT, hostile, FINISH, {"choices": [], "usage": USAGE}]
    ask(front, stream, answering(200, sse(chunks), SSE), BROKE)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("front", [0, 1], ids=FRONT_IDS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_upstream_answer(case: str, front: int, stream: bool) -> None:
    status, body, headers = CASES[case]
    ask(front, stream, answering(status, body, headers), BROKE | {status})


@pytest.mark.parametrize("front", [0, 1], ids=FRONT_IDS)
@pytest.mark.parametrize("cut", [0, 2, 4, 7])
def test_a_stream_cut_off_ends_in_the_fronts_failure(front: int, cut: int) -> None:
    """A stream that breaks off ends with the front's failure, never as if it were whole."""
    answer = ask(front, True, cut_after(sse(CHUNKS[:cut], done=False)), BROKE)
    if front == 0:
        assert responses_events(answer)[-1]["type"] == "response.failed"
    else:
        assert parse_messages(answer.content)[-1]["type"] == "error"


# ── a follow-up after a hostile turn ─────────────────────────────────────────


def responses_history(answer: httpx.Response) -> list[Any]:
    """The output the client got, and a result for each call in it."""
    if answer.headers["content-type"].startswith("text/event-stream"):
        output = responses_events(answer)[-1]["response"]["output"]
    else:
        output = answer.json()["output"]
    results = [
        {
            "type": f"{item['type']}_output",
            "call_id": item["call_id"],
            "output": "done",
        }
        for item in output
        if item["type"] in ("function_call", "custom_tool_call")
    ]
    return [*output, *results]


def message_blocks(answer: httpx.Response) -> list[dict[str, Any]]:
    """The content blocks the client got, streamed or whole, as it sends them back."""
    if not answer.headers["content-type"].startswith("text/event-stream"):
        return list(answer.json()["content"])
    blocks: list[dict[str, Any]] = []
    inputs: list[str] = []
    for event in parse_messages(answer.content):
        if event["type"] == "content_block_start":
            blocks.append(dict(event["content_block"]))
            inputs.append("")
        elif event["type"] == "content_block_delta":
            delta, block = event["delta"], blocks[-1]
            if delta["type"] == "input_json_delta":
                inputs[-1] += delta["partial_json"]
                block["input"] = json.loads(inputs[-1])
            else:
                field = {"text_delta": "text", "thinking_delta": "thinking"}.get(
                    delta["type"], "signature"
                )
                block[field] = block.get(field, "") + delta[field]
    return blocks


def _follow_up(front: int, stream: bool, answer: httpx.Response) -> dict[str, Any]:
    if front == 0:
        history = responses_history(answer)
        return {**RESPONSES_REQUEST, "input": [{"role": "user", "content": "weather?"}, *history]}
    blocks = message_blocks(answer)
    results = [
        {"type": "tool_result", "tool_use_id": block["id"], "content": "done"}
        for block in blocks
        if block["type"] == "tool_use"
    ]
    turns = [{"role": "assistant", "content": blocks}] if blocks else []
    if results:
        turns.append({"role": "user", "content": results})
    else:
        turns.append({"role": "user", "content": "and?"})
    return {**MESSAGES_REQUEST, "messages": [*MESSAGES_REQUEST["messages"], *turns]}


@BOUNDED
@given(
    st.sampled_from([0, 1]),
    st.booleans(),
    mutated({"chunks": CHUNKS}, CHAT_KEYS, CHAT_VALUES),
)
def test_a_follow_up_after_a_hostile_turn_is_answered(
    front: int, stream: bool, hostile: Any
) -> None:
    """What a hostile turn left in the store (its receipts, its transcript) comes back on the
    follow-up the client sends with what it was given: the follow-up is answered, and what goes
    upstream is JSON."""
    chunks = hostile.get("chunks") if isinstance(hostile, dict) else None
    chunks = chunks if isinstance(chunks, list) else [chunks]
    path, _, headers, check = FRONTS[front]
    session = Session(answering(200, sse(chunks), SSE))
    request = {**FRONTS[front][1], "stream": stream}
    first = session.post(path, encoded(request), headers)
    check(first, BROKE)
    if first.status_code != 200 or b"response.failed" in first.content:
        return
    if b"event: error" in first.content:
        return
    upstream = ValidUpstream()
    session.upstream = upstream
    follow_up = {**_follow_up(front, stream, first), "stream": stream}
    check(session.post(path, encoded(follow_up), headers))
    assert upstream.problems == []


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("front", [0, 1], ids=FRONT_IDS)
def test_the_follow_up_of_an_unmutated_turn_gets_its_receipts_back(
    front: int, stream: bool
) -> None:
    """The flow the property drives reaches the receipts: the follow-up of the base turn goes
    upstream with its reasoning and Gemini's signature restored."""
    path, request, headers, check = FRONTS[front]
    session = Session(answering(200, sse(CHUNKS), SSE))
    first = session.post(path, encoded({**request, "stream": stream}), headers)
    check(first)
    sent: list[Any] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return ValidUpstream()(request)

    session.upstream = upstream
    follow_up = {**_follow_up(front, stream, first), "stream": stream}
    check(session.post(path, encoded(follow_up), headers))
    assistant = next(m for m in sent[0]["messages"] if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "hm", assistant
    assert assistant["tool_calls"][0]["extra_content"] == SIGNATURE
