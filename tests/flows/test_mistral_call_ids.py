"""A conversation begun on an OpenAI-like upstream (`call_…` ids) continues on a Mistral-like
one, through the real OpenAI SDK and the real proxy. Sent straight to the Mistral fake, the
history is rejected with Mistral's error; through the proxy the client's ids are mapped to nine
alphanumerics on the way up, the same way on every turn, and Mistral's own new id reaches the
client as Mistral sent it."""

from __future__ import annotations

import re
from typing import Any

import openai
import orjson
import pytest

from proxy.repair.messages.nine_alnum_ids import nine_alnum
from tests.support import message_upstreams as fakes
from tests.support.message_upstreams import MessageUpstream, serving
from tests.support.proxies import running_proxy

OPENAI_ID = "call_Z8bq2TnCk1YwAe4sPq7xLm0R"
MISTRAL_ID = "Kp3xW9qZ2"
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


def as_history(message: Any) -> dict[str, Any]:
    """The assistant message as a client keeps it: its content and calls, ids as received."""
    return {
        "role": "assistant",
        "content": message.content,
        "tool_calls": [call.model_dump() for call in message.tool_calls],
    }


def ids_in(raw: bytes) -> list[str]:
    messages = orjson.loads(raw)["messages"]
    found = []
    for message in messages:
        found += [call["id"] for call in message.get("tool_calls") or []]
        if message.get("role") == "tool":
            found.append(message["tool_call_id"])
    return found


def test_a_conversation_with_call_ids_continues_on_mistral() -> None:
    gpt = MessageUpstream((), call_ids=(OPENAI_ID,))
    mistral = MessageUpstream(
        (fakes.mistral_roles, fakes.mistral_content, fakes.mistral_ids), call_ids=(MISTRAL_ID,)
    )
    with serving(gpt) as gpt_url, serving(mistral) as mistral_url:
        route = {
            "name": "mistral",
            "models": ["mistral-*"],
            "base_url": mistral_url,
            "profile": "mistral",
        }
        with running_proxy(gpt_url, routes=[route]) as proxy:
            sdk = client(f"{proxy}/v1")
            messages: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
            first = sdk.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
            assert first.choices[0].message.tool_calls[0].id == OPENAI_ID
            messages += [
                as_history(first.choices[0].message),
                {"role": "tool", "tool_call_id": OPENAI_ID, "content": "sunny"},
                {"role": "user", "content": "and in Lyon?"},
            ]

            # Straight to Mistral, the history fails on the id the first upstream made.
            with pytest.raises(openai.BadRequestError) as refused:
                client(mistral_url).chat.completions.create(
                    model="mistral-large-latest", messages=messages, tools=TOOLS
                )
            assert refused.value.status_code == 400
            assert f"Tool call id was {OPENAI_ID} but must be a-z, A-Z, 0-9" in str(refused.value)

            # Through the proxy: Mistral calls a tool, with its own id.
            second = sdk.chat.completions.create(
                model="mistral-large-latest", messages=messages, tools=TOOLS
            )
            new_call = second.choices[0].message.tool_calls[0]
            assert new_call.id == MISTRAL_ID
            messages += [
                as_history(second.choices[0].message),
                {"role": "tool", "tool_call_id": MISTRAL_ID, "content": "rainy"},
            ]
            third = sdk.chat.completions.create(
                model="mistral-large-latest", messages=messages, tools=TOOLS
            )
            assert third.choices[0].message.content == "It is sunny."

    mapped = nine_alnum(OPENAI_ID)
    assert re.fullmatch(r"[A-Za-z0-9]{9}", mapped)
    turn_two, turn_three = mistral.received[-2:]
    assert ids_in(turn_two) == [mapped, mapped]
    # The next turn maps the client's id the same way, and leaves Mistral's own as it is.
    assert ids_in(turn_three) == [mapped, mapped, MISTRAL_ID, MISTRAL_ID]
    # The client's history keeps its own ids: nothing mapped ever reaches it.
    assert messages[1]["tool_calls"][0]["id"] == OPENAI_ID
