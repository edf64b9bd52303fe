"""A non-streamed completion through the stream links: as a one-event stream and back."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import orjson
import pytest

from proxy.repair.one_event import OneEvent
from proxy.repair.tally import Tally
from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.support.phases import forwarded, phases

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {}}},
]
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS}
USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def call(call_id: str | None = "call_1", arguments: str = '{"city": "Paris"}') -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }
    if call_id is None:
        del entry["id"]
    return entry


def completion(*messages: dict[str, Any], finish: str | None = "stop") -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": i, "message": m, "logprobs": None, "finish_reason": finish}
            for i, m in enumerate(messages)
        ],
        "usage": USAGE,
        "system_fingerprint": "fp",
    }


def repaired(body: dict[str, Any], emit: str = "atomic") -> tuple[bool, Tally]:
    settings = Settings().with_values({"tool_calls.emit": emit})
    exchange = Tally("t")
    chain = phases(settings).stream(forwarded(copy.deepcopy(REQUEST)), exchange)
    return asyncio.run(chain.on_response(body)), exchange


# ── the conversion ──────────────────────────────────────────────────────────


def test_the_event_is_the_body_with_each_message_as_a_delta_and_its_calls_indexed() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [call(), call("call_2")]}
    body = completion(message, finish="tool_calls")
    received = copy.deepcopy(body)
    chunk = OneEvent(body).chunk
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["usage"] == USAGE and chunk["id"] == "cmpl-1"
    (choice,) = chunk["choices"]
    assert list(choice) == ["index", "delta", "logprobs", "finish_reason"]
    assert choice["finish_reason"] == "tool_calls"
    assert [entry["index"] for entry in choice["delta"]["tool_calls"]] == [0, 1]
    assert body == received  # the trip's objects are its own


def test_the_fold_concatenates_texts_and_merges_calls_by_index() -> None:
    message = {"role": "assistant", "content": "a", "tool_calls": [call()]}
    trip = OneEvent(completion(message, finish="tool_calls"))
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather"}}
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]},
        {"choices": [{"index": 0, "delta": {"content": "b", "tool_calls": [opening]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [_part('{"city": ')]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [_part('"Paris"}')]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    folded = trip.fold(chunks)
    assert folded["object"] == "chat.completion"
    (choice,) = folded["choices"]
    assert choice["message"] == {"role": "assistant", "content": "ab", "tool_calls": [call()]}
    assert list(choice["message"]["tool_calls"][0]) == ["id", "type", "function"]
    assert choice["finish_reason"] == "tool_calls"


def _part(arguments: str) -> dict[str, Any]:
    return {"index": 0, "function": {"arguments": arguments}}


# ── through the default chain ───────────────────────────────────────────────


def test_nothing_to_repair_leaves_the_body_untouched() -> None:
    calls = {"role": "assistant", "content": None, "tool_calls": [call()]}
    text = {"role": "assistant", "content": "Sunny."}
    for body in (completion(text), completion(calls, finish="tool_calls")):
        received = copy.deepcopy(body)
        changed, exchange = repaired(body)
        assert not changed and body == received
        assert exchange.repairs == {}


def test_two_choices_are_each_repaired_and_keep_their_own_finish() -> None:
    calls = {"role": "assistant", "content": None, "tool_calls": [call(None)]}
    text = {"role": "assistant", "content": "Sunny."}
    body = completion(calls, text, finish="stop")
    changed, exchange = repaired(body)
    assert changed
    first, second = body["choices"]
    (made,) = first["message"]["tool_calls"]
    assert made["id"].startswith("call_") and "index" not in made
    assert first["finish_reason"] == "tool_calls"
    assert second == {"index": 1, "message": text, "logprobs": None, "finish_reason": "stop"}
    assert exchange.repairs == {"tool_call_id_generated": 1, "finish_reason_rewritten": 1}


def test_usage_and_every_other_key_stay_in_their_order() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [{"type": "url_citation", "url_citation": {"url": "https://x.test"}}],
        "audio": {"id": "audio_1", "data": "AAAA", "expires_at": 1, "transcript": "hi"},
        "tool_calls": [{**call(None), "vendor": {"kept": True}}],
    }
    body = completion(message, finish="tool_calls")
    keys = list(body)
    changed, _ = repaired(body)
    assert changed
    assert list(body) == keys and body["usage"] == USAGE and body["object"] == "chat.completion"
    folded = body["choices"][0]["message"]
    assert list(folded) == list(message)
    for key in ("refusal", "annotations", "audio"):
        assert folded[key] == message[key]
    (made,) = folded["tool_calls"]
    assert made["vendor"] == {"kept": True}
    assert list(made) == ["type", "function", "vendor", "id"]


def test_the_trips_index_is_not_counted_nor_left_but_an_upstreams_own_stays() -> None:
    own = {**call(None), "index": 0}
    body = completion({"role": "assistant", "content": None, "tool_calls": [own]})
    changed, exchange = repaired(body)
    assert changed and body["choices"][0]["message"]["tool_calls"][0]["index"] == 0
    assert "tool_call_index_added" not in exchange.repairs
    body = completion({"role": "assistant", "content": None, "tool_calls": [call(None)]})
    repaired(body)
    assert "index" not in body["choices"][0]["message"]["tool_calls"][0]


def test_both_emit_modes_fold_to_the_same_complete_calls() -> None:
    leaked = [call("c1", '{"city": "Par'), call("c2", 'is"}{"city": "Tokyo"}'), call(None, "")]
    message = {"role": "assistant", "content": None, "tool_calls": leaked}
    bodies, counts = [], []
    for emit in ("auto", "atomic", "incremental"):
        body = completion(copy.deepcopy(message), finish="tool_calls")
        changed, exchange = repaired(body, emit)
        assert changed
        bodies.append(body)
        counts.append(dict(exchange.repairs))
    assert bodies[0] == bodies[1] == bodies[2] and counts[0] == counts[1] == counts[2]
    arguments = [
        c["function"]["arguments"] for c in bodies[0]["choices"][0]["message"]["tool_calls"]
    ]
    assert arguments == ['{"city": "Paris"}', '{"city": "Tokyo"}', "{}"]


def test_a_nameless_call_that_nothing_names_is_left_out() -> None:
    nameless = {"id": "x", "type": "function", "function": {"arguments": "{}"}}
    body = completion({"role": "assistant", "content": None, "tool_calls": [nameless, call()]})
    body["choices"][0]["finish_reason"] = "tool_calls"
    changed, exchange = repaired(body)
    assert changed
    assert body["choices"][0]["message"]["tool_calls"] == [call()]
    assert exchange.repairs == {"tool_call_without_name": 1}


# ── through the proxy: what the client gets ─────────────────────────────────


def proxied(raw: bytes) -> tuple[bytes, str]:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=raw, headers={"content-type": "application/json"})

    settings = Settings().with_values({"upstream.base_url": "http://upstream.test/v1"})
    app = create_app(settings, transport=httpx.MockTransport(upstream))

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            # A credential: the receipt link watches the answer too.
            headers = {"authorization": "Bearer tenant-key"}
            return await client.post("/v1/chat/completions", json=REQUEST, headers=headers)

    response = asyncio.run(send())
    return response.content, response.headers["x-streamfix-repairs"]


@pytest.mark.parametrize(
    "raw",
    [
        # Spacing, escapes, a float and key orders no serializer would reproduce.
        b'{ "id" : "cmpl-1", "object":"chat.completion", "choices" : [ {"finish_reason":"stop",'
        b'"index":0, "message":{"content":"caf\\u00e9 \\/ 1.0E2","role":"assistant"}} ],'
        b'"usage":{"total_tokens":1.0} }\n',
        # Whole calls that the links rebuild, the same.
        b'{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"{\\"city\\": \\"P\\"}",'
        b'"name":"get_weather"},"type":"function","id":"call_1"}],"role":"assistant",'
        b'"content":null},"index":0,"finish_reason":"tool_calls"}],"object":"chat.completion"}',
        # No finish said, no calls: a whole body's null is the upstream's word, kept.
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},'
        b'"finish_reason":null}]}',
        b'{"choices":[{"index":0,"message":{"role":"assistant"}}]}',
        # A call list given as null, the way Snowflake says "no calls".
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":null},'
        b'"finish_reason":"stop"}]}',
    ],
)
def test_a_body_nothing_repairs_reaches_the_client_byte_for_byte(raw: bytes) -> None:
    sent, repairs = proxied(raw)
    assert sent == raw
    assert repairs == "none"


def test_a_repaired_body_reaches_the_client_repaired() -> None:
    body = completion({"role": "assistant", "content": None, "tool_calls": [call(None)]})
    sent, repairs = proxied(orjson.dumps(body))
    (made,) = orjson.loads(sent)["choices"][0]["message"]["tool_calls"]
    assert made["id"].startswith("call_") and "index" not in made
    assert repairs == "finish_reason_rewritten:1,tool_call_id_generated:1"


def test_a_missing_finish_beside_calls_becomes_tool_calls() -> None:
    body = completion({"role": "assistant", "content": None, "tool_calls": [call()]}, finish=None)
    changed, exchange = repaired(body)
    assert changed and body["choices"][0]["finish_reason"] == "tool_calls"
    assert exchange.repairs == {"finish_reason_added": 1}


def test_a_custom_tools_call_is_not_the_links_to_name_or_drop() -> None:
    custom = {"id": "ct_1", "type": "custom", "custom": {"name": "grep", "input": "x"}}
    # Alone: the choice goes out as received (its "tool_calls" finish is right).
    body = completion({"role": "assistant", "content": None, "tool_calls": [custom]})
    body["choices"][0]["finish_reason"] = "tool_calls"
    received = copy.deepcopy(body)
    changed, exchange = repaired(body)
    assert not changed and body == received and exchange.repairs == {}
    # Beside function calls: back at its place, theirs repaired around it.
    untyped = {"id": "call_2", "function": {"name": "get_time", "arguments": ""}}
    calls = [call(None), custom, untyped]
    body = completion({"role": "assistant", "content": None, "tool_calls": calls})
    body["choices"][0]["finish_reason"] = "tool_calls"
    changed, exchange = repaired(body)
    assert changed
    first, second, third = body["choices"][0]["message"]["tool_calls"]
    assert first["id"].startswith("call_") and second == custom
    assert third == {"id": "call_2", "function": {"name": "get_time", "arguments": "{}"}, **TYPE}
    assert exchange.repairs == {
        "tool_call_id_generated": 1,
        "tool_call_type_added": 1,
        "arguments_empty": 1,
    }


TYPE = {"type": "function"}
