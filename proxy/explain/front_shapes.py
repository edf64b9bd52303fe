"""What a request holds, counted the way a person compares a front's request with the chat
request it became: items or blocks by type, messages by role, calls, tools, receipt tokens.

A Responses request folds a run of `function_call` items into one assistant message and turns
each `function_call_output` into a `tool` message; a Messages request's `tool_use` blocks become
`tool_calls` and its `tool_result` blocks `tool` messages. Side by side, these counts show that
folding without reading either body.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

Shape = dict[str, Any]
"""Ordered: a count, or counts by type or role."""


def _objects(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _by(items: list[dict[str, Any]], key: str, default: str) -> dict[str, int]:
    return dict(Counter(str(item.get(key) or default) for item in items))


def _tools(body: dict[str, Any], shape: Shape) -> None:
    tools = _objects(body.get("tools"))
    if tools:
        shape["tools"] = _by(tools, "type", "custom")


def responses_shape(body: Any) -> Shape:
    """A Responses request: its input items by type, instructions, the response it continues,
    its tools by type, and the receipt tokens (`encrypted_content`) it brings back."""
    if not isinstance(body, dict):
        return {}
    shape: Shape = {}
    given = body.get("input")
    items = [{"type": "message"}] if isinstance(given, str) else _objects(given)
    shape["input items"] = _by(items, "type", "message")
    if body.get("instructions"):
        shape["instructions"] = 1
    if body.get("previous_response_id"):
        shape["previous response"] = 1
    _tools(body, shape)
    tokens = sum(1 for item in items if item.get("encrypted_content"))
    if tokens:
        shape["receipt tokens"] = tokens
    return shape


def messages_shape(body: Any) -> Shape:
    """A Messages request: its system prompt, messages by role, content blocks by type, tools,
    and the receipt tokens (thinking signatures) it brings back."""
    if not isinstance(body, dict):
        return {}
    shape: Shape = {}
    if body.get("system"):
        shape["system"] = 1
    messages = _objects(body.get("messages"))
    shape["messages"] = _by(messages, "role", "?")
    blocks: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        blocks += [{"type": "text"}] if isinstance(content, str) else _objects(content)
    shape["blocks"] = _by(blocks, "type", "?")
    tools = _objects(body.get("tools"))
    if tools:
        shape["tools"] = len(tools)
    signed = ("thinking", "redacted_thinking")
    tokens = sum(
        1
        for block in blocks
        if block.get("type") in signed and (block.get("signature") or block.get("data"))
    )
    if tokens:
        shape["receipt tokens"] = tokens
    return shape


def chat_shape(body: Any) -> Shape:
    """A chat request: its messages by role, the tool calls its assistant messages carry, and
    its tools."""
    if not isinstance(body, dict):
        return {}
    messages = _objects(body.get("messages"))
    shape: Shape = {"messages": _by(messages, "role", "?")}
    calls = sum(len(_objects(message.get("tool_calls"))) for message in messages)
    if calls:
        shape["tool calls"] = calls
    tools = _objects(body.get("tools"))
    if tools:
        shape["tools"] = len(tools)
    return shape


SHAPES = {"Responses": responses_shape, "Messages": messages_shape}
"""Each front's request counter, by the front's name (replay_check.FRONTS)."""


def shape_text(shape: Shape) -> str:
    """`input items: message 1, function_call 2; tools: function 2; receipt tokens: 1`."""
    parts = []
    for name, value in shape.items():
        if isinstance(value, dict):
            counted = ", ".join(f"{key} {n}" for key, n in value.items())
            parts.append(f"{name}: {counted or 'none'}")
        else:
            parts.append(f"{name}: {value}")
    return "; ".join(parts) or "(not a JSON object)"
