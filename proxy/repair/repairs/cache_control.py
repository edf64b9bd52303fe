"""Prompt-cache marks (`cache_control`) an upstream refuses, sent without their `ttl` or not at
all."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from proxy.repair.messages.text_parts import texts_of
from proxy.repair.request_phase import RequestContext, RequestRepair
from proxy.wire.json_shapes import objects_in

DROPPED_KIND = "cache_control_dropped"
TTL_DROPPED_KIND = "cache_control_ttl_dropped"

MARK = "cache_control"

SYSTEM_SEPARATOR = "\n\n"
"""Between the texts of a system message's parts made one string again: the blank line the
Messages front joins its system blocks with, so the string is the one it sends unmarked."""

_SYSTEM_ROLES = ("system", "developer")


def _marks(request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The request's prompt-cache marks, lazily: on its messages, their parts, and its tools."""
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        mark = message.get(MARK)
        if isinstance(mark, dict):
            yield mark
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(mark := part.get(MARK), dict):
                    yield mark
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and isinstance(mark := tool.get(MARK), dict):
            yield mark


def has_marks(request: Mapping[str, Any]) -> bool:
    """Whether the request carries a mark: every request's recall asks, so one plain loop that
    stops at the first."""
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict):
            if MARK in message:
                return True
            content = message.get("content")
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and MARK in part:
                        return True
    tools = request.get("tools")
    return isinstance(tools, list) and any(isinstance(t, dict) and MARK in t for t in tools)


def has_ttl_marks(request: Mapping[str, Any]) -> bool:
    return has_marks(request) and any("ttl" in mark for mark in _marks(request))


def marked_parts_at(request: Mapping[str, Any], at: int) -> bool:
    """Whether the message at index `at` is content parts one of which carries a mark."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not 0 <= at < len(messages):
        return False
    message = messages[at]
    content = message.get("content") if isinstance(message, dict) else None
    return any(MARK in part for part in objects_in(content))


class CacheControlDropped(RequestRepair):
    """Anthropic's prompt caching marks a breakpoint with `cache_control` (`{"type":
    "ephemeral"}`, optionally `"ttl": "1h"`) on a content part, and OpenRouter takes the same
    mark on chat content parts, on a `tool` or assistant message and on a tool definition for
    Anthropic and Gemini models (its prompt-caching guide, and its AI SDK provider's
    convert-to-openrouter-chat-messages.ts); the Messages front sends Claude Code's marks that
    way, and chat clients send them for OpenRouter. Upstreams with strict schemas refuse the
    whole request over one: Groq and Cerebras with 400 "property 'cache_control' is
    unsupported" (alma-releases#59), pydantic servers with `cache_control: Extra inputs are not
    permitted`; DeepSeek and Groq refuse the system message as parts that a mark needs
    (`messages[0]: invalid type: sequence, expected a string`, litellm#6642; `'messages.0.
    content' : value must be a string`, OpenHands#4643); Bedrock's older Claude models and
    Vertex refuse only the `ttl` (pi#1570, tghamm/Anthropic.SDK#165).

    With the route's `cache_control = "without_ttl"` (learned from the refusal, or set), each
    mark loses its `ttl` (counted `cache_control_ttl_dropped`, one per mark): the breakpoint
    stays, at the default five minutes. With `"dropped"` every mark goes (counted
    `cache_control_dropped`, one per mark), and a system or developer message whose parts are
    then text only goes up as one string, the texts a blank line apart, as does a user message
    left with one text part: the shapes a request without marks has, which those upstreams
    take. A request without a mark is never touched."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        rule = context.rules.cache_control
        if rule == "as_sent":
            return False
        marked = [*objects_in(body.get("messages")), *objects_in(body.get("tools"))]
        if rule == "without_ttl":
            dropped = sum(_without_ttl(holder) for holder in _holders(marked))
            context.tally.count(TTL_DROPPED_KIND, dropped)
            return dropped > 0
        dropped = 0
        for holder in marked:
            dropped += _unmarked(holder)
        context.tally.count(DROPPED_KIND, dropped)
        return dropped > 0


def _holders(marked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every object that may carry a mark: the messages and tools, and the messages' parts."""
    out = list(marked)
    for holder in marked:
        out += objects_in(holder.get("content"))
    return out


def _without_ttl(holder: dict[str, Any]) -> int:
    mark = holder.get(MARK)
    if isinstance(mark, dict) and "ttl" in mark:
        holder[MARK] = {key: value for key, value in mark.items() if key != "ttl"}
        return 1
    return 0


def _unmarked(holder: dict[str, Any]) -> int:
    """The marks taken off one message (or tool) and its parts; its parts made a string again
    where they were parts only to carry a mark."""
    dropped = int(holder.pop(MARK, None) is not None)
    content = holder.get("content")
    if not isinstance(content, list):
        return dropped
    parts_dropped = sum(
        int(part.pop(MARK, None) is not None) for part in content if isinstance(part, dict)
    )
    if parts_dropped:
        text = _as_string(holder.get("role"), content)
        if text is not None:
            holder["content"] = text
    return dropped + parts_dropped


def _as_string(role: Any, content: list[Any]) -> str | None:
    texts = texts_of(content)
    if texts is None:
        return None
    if role in _SYSTEM_ROLES:
        return SYSTEM_SEPARATOR.join(texts)
    if role == "user" and len(texts) == 1:
        return texts[0]
    return None
