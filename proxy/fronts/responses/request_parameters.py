"""A Responses request's parameters: the ones refused (a table), the hints ignored (a table),
and the rest mapped onto the chat request.

What would change the answer and cannot be honoured is refused with OpenAI's 400
`unsupported_parameter`, naming the parameter; hints without a chat counterpart are accepted
and not forwarded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.fronts.quoted import quoted
from proxy.fronts.responses.chat_tools import HOSTED_TOOLS
from proxy.fronts.responses.openai_errors import invalid, unsupported
from proxy.fronts.responses.translation import NAMESPACE_SEPARATOR, Translation


@dataclass(frozen=True, slots=True)
class RefusedParameter:
    name: str
    refused: Callable[[Any], bool]
    """Whether the value given refuses the request."""
    why: str


def _given(value: Any) -> bool:
    return value is not None


REFUSED = (
    RefusedParameter(
        "background",
        lambda value: value is True,
        "background responses are not supported by this proxy",
    ),
    RefusedParameter("conversation", _given, "conversations are not supported by this proxy"),
    RefusedParameter("prompt", _given, "prompt templates are not supported by this proxy"),
)
"""In the order they are checked; a `tool_choice` forcing a hosted tool is refused after."""
IGNORED = frozenset(
    {
        "prompt_cache_key",
        "prompt_cache_retention",
        "client_metadata",
        "include",
        "truncation",
        "service_tier",
        "store",
        "metadata",
        "safety_identifier",
        "user",
        "top_logprobs",
        "stream_options",
    }
)
"""Hints: accepted and not forwarded (a chat upstream has nothing to do with them)."""
COPIED = (
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "seed",
    "frequency_penalty",
    "presence_penalty",
)
"""Parameters chat takes under the same name and meaning."""


def refuse(body: dict[str, Any]) -> None:
    """Raises FrontError for a parameter this front cannot honour."""
    for parameter in REFUSED:
        if parameter.refused(body.get(parameter.name)):
            raise unsupported(parameter.name, parameter.why)
    choice = body.get("tool_choice")
    forced = choice.get("type") if isinstance(choice, dict) else None
    if isinstance(forced, str) and forced in HOSTED_TOOLS:
        raise unsupported("tool_choice", f"the hosted tool {forced!r} cannot be forced here")


def map_parameters(
    body: dict[str, Any], chat: dict[str, Any], translation: Translation, tools: list[Any]
) -> None:
    """The parameters chat has a counterpart for, onto the chat request."""
    for name in COPIED:
        if body.get(name) is not None:
            chat[name] = body[name]
    if not tools:
        chat.pop("parallel_tool_calls", None)  # some upstreams refuse it without tools
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        chat["reasoning_effort"] = reasoning["effort"]
    choice = _tool_choice(body.get("tool_choice"), chat, translation)
    if choice is not None and tools:
        chat["tool_choice"] = choice
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_object":
            chat["response_format"] = {"type": "json_object"}
        elif fmt.get("type") == "json_schema":
            schema = {k: fmt[k] for k in ("name", "schema", "description", "strict") if k in fmt}
            chat["response_format"] = {"type": "json_schema", "json_schema": schema}


ALLOWED_TOOLS_MODES = ("auto", "required")
"""What an `allowed_tools` choice may say (OpenAI's): chat's tool_choice of the same name."""


def _tool_choice(choice: Any, chat: dict[str, Any], translation: Translation) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if not isinstance(choice, dict):
        raise invalid("tool_choice", "must be a string or an object")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise invalid("tool_choice.name", "required, a string")
        namespace = choice.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise invalid("tool_choice.namespace", "must be a string")
        if namespace:
            name = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
        return {"type": "function", "function": {"name": name}}
    if kind == "allowed_tools":
        listed = choice.get("tools")
        if listed is not None and not isinstance(listed, list):
            raise invalid("tool_choice.tools", "must be a list of tools")
        allowed = {
            t["name"]
            for t in listed or ()
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        }
        tools = chat.get("tools")
        if tools and allowed:
            chat["tools"] = [t for t in tools if t["function"]["name"] in allowed] or tools
        mode = choice.get("mode")
        if mode is not None and mode not in ALLOWED_TOOLS_MODES:
            raise invalid("tool_choice.mode", "must be 'auto' or 'required'")
        return mode or "auto"
    raise invalid("tool_choice", f"unknown tool_choice type {quoted(kind)}")
