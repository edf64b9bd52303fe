"""The battery, as data: each check a name, what it asks, and how its request is built.

Every request asks for few tokens (`MAX_TOKENS`): the doctor wants the answer's shape, not its
text. The follow-up is built from the answer to `tool_call_stream`, as a client rebuilds a
history: the call's id, type, name and arguments only (no upstream-specific fields), then the
tool's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_TOKENS = 64


def _city_tool(name: str, description: str) -> dict[str, Any]:
    """A function tool taking one `city` string."""
    parameters = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


WEATHER = _city_tool("get_weather", "The weather in a city.")
TIME = _city_tool("get_time", "The local time in a city.")
# `additionalProperties` and a local `$ref`: what Zod and Pydantic emit, and what Google's
# Schema (an OpenAPI subset) refuses.
STRICT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"place": {"$ref": "#/$defs/place"}},
            "required": ["place"],
            "additionalProperties": False,
            "$defs": {
                "place": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": False,
                }
            },
        },
    },
}
DOTTED = {
    "type": "function",
    "function": {**WEATHER["function"], "name": "weather.get"},
}
ASK_WEATHER = "What is the weather in Paris? Use the tool."


@dataclass
class Context:
    """What one run knows: the model, and the direct answers so far (check name -> calls)."""

    model: str
    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    name: str
    asks: str
    """What the request asks, in words, for the plan printed before anything is sent."""
    build: Callable[[Context], dict[str, Any]]
    expects_calls: int = 0
    """How many tool calls a model following the request makes (0: none asked for)."""

    def body(self, context: Context) -> dict[str, Any]:
        return {"model": context.model, "max_tokens": MAX_TOKENS, **self.build(context)}


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _tool_call(tools: list[dict[str, Any]], text: str, stream: bool = True) -> dict[str, Any]:
    return {"stream": stream, "messages": _user(text), "tools": tools, "tool_choice": "required"}


def _follow_up(context: Context) -> dict[str, Any]:
    """Turn two: the first turn's call as a client keeps it, and its result."""
    calls = context.calls.get("tool_call_stream") or []
    call = calls[0] if calls else {}
    kept = {
        "id": call.get("id") or "call_doctor_0",
        "type": "function",
        "function": {
            "name": call.get("name") or "get_weather",
            "arguments": call.get("arguments") or '{"city": "Paris"}',
        },
    }
    messages = [
        *_user(ASK_WEATHER + " Then ask for the time there too."),
        {"role": "assistant", "content": None, "tool_calls": [kept]},
        {"role": "tool", "tool_call_id": kept["id"], "content": "18 degrees, clear"},
    ]
    return {"stream": True, "messages": messages, "tools": [WEATHER, TIME]}


CHECKS: tuple[Check, ...] = (
    Check(
        "plain_stream",
        "a streamed answer, no tools",
        lambda c: {
            "stream": True,
            "messages": _user("Say hello in one word."),
        },
    ),
    Check(
        "tool_call_stream",
        "one tool call, streamed",
        lambda c: _tool_call([WEATHER], ASK_WEATHER),
        expects_calls=1,
    ),
    Check(
        "tool_call_json",
        "the same, not streamed",
        lambda c: _tool_call([WEATHER], ASK_WEATHER, stream=False),
        expects_calls=1,
    ),
    Check(
        "parallel_calls",
        "two calls in one turn, streamed",
        lambda c: _tool_call(
            [WEATHER, TIME], "What are the weather and the time in Paris? Call both tools at once."
        ),
        expects_calls=2,
    ),
    Check("follow_up", "turn two: the call and its result sent back", _follow_up),
    Check(
        "developer_role",
        "a `developer` message",
        lambda c: {
            "stream": True,
            "messages": [
                {"role": "developer", "content": "Answer in one word."},
                *_user("Say hello."),
            ],
        },
    ),
    Check(
        "schema_keywords",
        "a tool schema with additionalProperties and $ref",
        lambda c: _tool_call([STRICT_SCHEMA], ASK_WEATHER),
        expects_calls=1,
    ),
    Check(
        "dotted_tool_name",
        "a tool named `weather.get`",
        lambda c: _tool_call([DOTTED], ASK_WEATHER),
        expects_calls=1,
    ),
    Check(
        "two_system_messages",
        "a system message first and another after the user's (as opencode sends)",
        lambda c: {
            "stream": True,
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                *_user("Say hello."),
                {"role": "system", "content": "Answer in one word."},
            ],
        },
    ),
    Check(
        "include_usage",
        "a stream asking for usage (`stream_options.include_usage`)",
        lambda c: {
            "stream": True,
            "stream_options": {"include_usage": True},
            # Not plain_stream's words: without stream_options it would be that request again.
            "messages": _user("Say hi in one word."),
        },
    ),
    Check(
        "tiny_max_tokens",
        "a long answer asked for with `max_tokens` 1 (how the cut is reported)",
        lambda c: {
            "stream": True,
            "max_tokens": 1,  # over MAX_TOKENS: one token, so the answer is surely cut
            "messages": _user("Write a long story about the sea, at least a thousand words."),
        },
    ),
)
assert len(CHECKS) <= 12  # the brief's bound on what one run sends
