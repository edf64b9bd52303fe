"""A Messages request's `tools` and `tool_choice` -> chat's: client tools as functions
(Anthropic's own tool types refused, each saying why: anthropic_tools.py), `tool_choice`
`auto` / `any` / `tool` / `none` as chat's `auto` / `required` / a named function / `none`,
`disable_parallel_tool_use` as `parallel_tool_calls: false`. A tool's `cache_control` goes on its
chat tool, beside `function`, where OpenRouter reads it (cache_marks.py)."""

from __future__ import annotations

from typing import Any

from proxy.fronts.messages.anthropic_errors import MessagesError, string_at
from proxy.fronts.messages.anthropic_tools import refusal
from proxy.fronts.messages.cache_marks import mark_of, marked
from proxy.fronts.quoted import quoted

TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
"""Anthropic's tool_choice types that name no tool -> chat's."""


def map_tools(body: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise MessagesError("tools: must be a list")
        chat["tools"] = [_tool(tool, f"tools.{i}") for i, tool in enumerate(tools)]
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict):
        raise MessagesError("tool_choice: must be an object")
    kind = choice.get("type")
    if isinstance(kind, str) and kind in TOOL_CHOICES:
        chat["tool_choice"] = TOOL_CHOICES[kind]
    elif kind == "tool":
        name = string_at(choice.get("name"), "tool_choice.name")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise MessagesError(f"tool_choice.type: {quoted(kind)} is not auto, any, tool or none")
    if choice.get("disable_parallel_tool_use") is True and chat.get("tools"):
        chat["parallel_tool_calls"] = False


def _tool(tool: Any, where: str) -> dict[str, Any]:
    """A client tool as a function. Anthropic's own tool types are refused, each saying why
    and what to do instead (anthropic_tools.py): its server tools need Anthropic to run them,
    its client tools (bash, text editor, computer use) carry no schema a chat model could use."""
    if not isinstance(tool, dict):
        raise MessagesError(f"{where}: must be an object")
    if tool.get("type") not in (None, "custom"):
        raise MessagesError(refusal(tool, where))
    function: dict[str, Any] = {"name": string_at(tool.get("name"), f"{where}.name")}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise MessagesError(f"{where}.input_schema: Field required")
    function["parameters"] = schema
    return marked({"type": "function", "function": function}, mark_of(tool))
