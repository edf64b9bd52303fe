"""A Kimi-like upstream reads the function's name from the call id (`functions.NAME:N`) and
fails on an id of any other shape. A client that stored Kimi's per-round ids sends a history
that repeats one; the proxy renames the repeat, through the real OpenAI SDK and the real proxy,
in Kimi's own shape, so the Kimi-like fake answers. Sent as `call_<hex>`, the way ids of other
shapes are renamed, the same history fails with the server's bare 500."""

from __future__ import annotations

import re
from typing import Any

import openai
import orjson
import pytest

from tests.support import message_upstreams as fakes
from tests.support.message_upstreams import MessageUpstream, serving
from tests.support.proxies import running_proxy

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=30)


def call(call_id: str, city: str) -> dict[str, Any]:
    arguments = orjson.dumps({"city": city}).decode()
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


def history(first: str, second: str) -> list[Any]:
    """Two rounds, each numbered from 0 by the server: round two repeats round one's id."""
    return [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call(first, "Paris")]},
        {"role": "tool", "tool_call_id": first, "content": "sunny"},
        {"role": "user", "content": "and in Lyon?"},
        {"role": "assistant", "content": "", "tool_calls": [call(second, "Lyon")]},
        {"role": "tool", "tool_call_id": second, "content": "rainy"},
        {"role": "user", "content": "thanks"},
    ]


def ids_in(raw: bytes) -> list[str]:
    found = []
    for message in orjson.loads(raw)["messages"]:
        found += [one["id"] for one in message.get("tool_calls") or []]
        if message.get("role") == "tool":
            found.append(message["tool_call_id"])
    return found


def test_a_repeated_kimi_id_is_renamed_in_kimis_shape_and_kimi_answers() -> None:
    kimi = MessageUpstream((fakes.kimi_ids,))
    messages = history("functions.get_weather:0", "functions.get_weather:0")
    with serving(kimi) as kimi_url, running_proxy(kimi_url) as proxy:
        # What the proxy's old renaming sent: an id of another shape, which Kimi fails on.
        with pytest.raises(openai.InternalServerError) as failed:
            client(kimi_url).chat.completions.create(
                model="kimi-k2",
                messages=history("functions.get_weather:0", "call_0a1b2c3d4e5f6a7b8c9d0e1f"),
                tools=TOOLS,
            )
        assert failed.value.status_code == 500

        answer = client(f"{proxy}/v1").chat.completions.create(
            model="kimi-k2", messages=messages, tools=TOOLS
        )
        assert answer.choices[0].message.content == "It is sunny."

    sent = ids_in(kimi.received[-1])
    assert sent == [
        "functions.get_weather:0",
        "functions.get_weather:0",
        "functions.get_weather:1",
        "functions.get_weather:1",
    ]


def test_a_repeated_id_of_another_shape_still_becomes_call_hex() -> None:
    upstream = MessageUpstream(())
    messages = history("call_client_made_0", "call_client_made_0")
    with serving(upstream) as url, running_proxy(url) as proxy:
        answer = client(f"{proxy}/v1").chat.completions.create(
            model="gpt-4o", messages=messages, tools=TOOLS
        )
        assert answer.choices[0].message.content == "It is sunny."
        assert answer.choices[0].finish_reason == "stop"
    first, first_result, renamed, renamed_result = ids_in(upstream.received[-1])
    assert first == first_result == "call_client_made_0"
    assert renamed == renamed_result
    assert re.fullmatch(r"call_[0-9a-f]{24}", renamed)
