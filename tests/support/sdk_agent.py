"""The tools of the multi-step flows as clients declare them (Vercel AI SDK and OpenAI shapes) and
what they "return", and the OpenAI Python SDK agent loop of those flows: ask, run the tools, ask
again, with each assistant message rebuilt the way an app puts it back in the history."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai

from tests.support.gemini_upstream import TOOL_SCHEMAS

VERCEL_SDKS = ("v1", "v2", "v3")
OPENAI_MODES = ("stream", "create-stream", "create")
VERCEL_TOOLS = [
    {"name": name, "description": f"the {name} tool", "parameters": schema}
    for name, schema in TOOL_SCHEMAS.items()
]
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}}
    for t in VERCEL_TOOLS
]
# What the tools "return", by name.
TOOL_RESULTS: dict[str, Any] = {"read_file": {"content": "hello"}, "list_dir": ["a.txt", "b.txt"]}

# Takes what the app does not know out of a non-streamed message's `model_dump()`, in place.
Forget = Callable[[dict[str, Any]], None]


def final_message(client: openai.OpenAI, stream: bool, **kwargs: Any) -> Any:
    """The assistant message of one request: streamed through the SDK's helper, or not."""
    if stream:
        with client.chat.completions.stream(**kwargs) as s:
            return s.get_final_completion().choices[0].message
    return client.chat.completions.create(**kwargs).choices[0].message


def history_call(call: Any) -> dict[str, Any]:
    """A tool call the SDK parsed, as an app puts it back in the history (by hand)."""
    function = {"name": call.function.name, "arguments": call.function.arguments}
    return {"id": call.id, "type": "function", "function": function}


def ask(
    client: openai.OpenAI, model: str, messages: list[dict[str, Any]], mode: str, forget: Forget
) -> dict[str, Any]:
    """One request in `mode` (one of OPENAI_MODES); returns the assistant message as an app puts
    it back in the history: rebuilt by hand from the streamed parts, or the non-streamed
    message's `model_dump()` after `forget`."""
    kwargs: dict[str, Any] = {"model": model, "messages": messages, "tools": OPENAI_TOOLS}
    if mode == "stream":
        # The SDK's helper; the message is rebuilt by hand from the parsed tool calls.
        message = final_message(client, True, **kwargs)
        rebuilt: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            rebuilt["tool_calls"] = [history_call(c) for c in message.tool_calls]
        return rebuilt
    if mode == "create-stream":
        # The hand-written accumulation apps use: a dict keyed on index (on id when a delta has
        # none, so that the same loop can run straight against Gemini), strings concatenated.
        content = ""
        calls: dict[Any, dict[str, Any]] = {}
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                key = tc.index if tc.index is not None else tc.id
                call = calls.setdefault(
                    key, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] += tc.id or ""
                if tc.function:
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
        rebuilt = {"role": "assistant", "content": content or None}
        if calls:
            rebuilt["tool_calls"] = list(calls.values())
        return rebuilt
    completion = client.chat.completions.create(**kwargs)
    dumped = completion.choices[0].message.model_dump(exclude_none=True)
    forget(dumped)
    return dumped


def run_turn(
    client: openai.OpenAI,
    model: str,
    messages: list[dict[str, Any]],
    mode: str,
    forget: Forget,
    max_steps: int = 5,
) -> str:
    """The agent loop: ask, run the tools, ask again, until a text answer. Appends to
    `messages`; returns the final text."""
    for _ in range(max_steps):
        assistant = ask(client, model, messages, mode, forget)
        messages.append(assistant)
        if not assistant.get("tool_calls"):
            return str(assistant.get("content"))
        for call in assistant["tool_calls"]:
            result = TOOL_RESULTS[call["function"]["name"]]
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    raise AssertionError(f"no text answer after {max_steps} steps")
