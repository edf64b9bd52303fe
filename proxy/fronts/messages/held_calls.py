"""A streamed answer's tool calls, held until the choice's finish and then each made one
whole `tool_use` block: a `tool_use` block's `partial_json` must be one JSON object, and calls
an upstream interleaved must never interleave as blocks. ToolCallRepair sends calls whole at
the finish anyway by default, so holding them costs nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.fronts.messages.tool_use_ids import client_id
from proxy.fronts.turns import call_extras
from proxy.wire import json_codec

ENCODED_KIND = "messages_tool_use_id_encoded"
"""A call id outside Anthropic's alphabet went to the client written in it (tool_use_ids.py)."""


def tool_use_id(given: Any) -> str:
    """The call's own id, or a new `toolu_` one for a call that came without."""
    return given or f"toolu_{os.urandom(12).hex()}"


def input_object(arguments: str) -> dict[str, Any] | None:
    """The arguments as the JSON object a `tool_use` input must be; None when they are not."""
    try:
        parsed = json_codec.loads(arguments)
    except json_codec.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields beside id, type and function (Gemini's signature), for the kept turn."""


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A held call made whole."""

    block: dict[str, Any]
    """The `tool_use` block's id and name."""
    arguments: str
    """Its input as one JSON object's text (`{}` for arguments that were not one)."""
    chat_call: dict[str, Any]
    """The call as the kept chat turn holds it."""


class HeldCalls:
    """The calls of one choice, by their chat `index`, until `flush`."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}

    def take(self, entry: dict[str, Any]) -> None:
        index = entry.get("index", len(self._calls))
        call = self._calls.setdefault(index if isinstance(index, int) else 0, _Call())
        if isinstance(entry.get("id"), str):
            call.id = entry["id"]
        function = entry.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"]:
                call.name = function["name"]
            if isinstance(function.get("arguments"), str):
                call.arguments.append(function["arguments"])
        call.extra.update(call_extras(entry))

    def flush(self, count: Callable[[str], None]) -> list[ToolUse]:
        """Every call held, in index order, made whole; none held after."""
        out: list[ToolUse] = []
        for position in sorted(self._calls):
            call = self._calls[position]
            if not call.name:
                count("tool_call_without_name_dropped")  # ToolCallRepair names them all
                continue
            arguments = "".join(call.arguments).strip() or "{}"
            if input_object(arguments) is None:
                count("tool_input_not_an_object")
                arguments = "{}"
            chat_id = tool_use_id(call.id)
            block = {"id": client_id(chat_id), "name": call.name}
            if block["id"] != chat_id:
                count(ENCODED_KIND)
            function = {"name": call.name, "arguments": arguments}
            # The kept turn holds the upstream's own id, as the follow-up restores it.
            chat_call = {"id": chat_id, "type": "function", "function": function, **call.extra}
            out.append(ToolUse(block, arguments, chat_call))
        self._calls.clear()
        return out
