"""Tool names renamed into what the upstream accepts, and back into the client's in its answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.repair.calls.tool_names import TOOL_NAME_RULES, rename_request
from proxy.repair.chunks import choices_of
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.request_phase import RequestContext, RequestRepair
from proxy.repair.tally import Tally
from proxy.wire.json_shapes import objects_in

RENAMED_KIND = "tool_name_renamed"
RESTORED_KIND = "tool_name_restored"


class ToolNamesRenamed(RequestRepair):
    """Gemini rejects the whole request when one declared function's name has a character
    outside `[a-zA-Z0-9_.:-]`, starts with a digit or passes 64 characters; OpenAI (and DeepSeek)
    when one is outside `[a-zA-Z0-9_-]{1,64}`, in the tools and in the history alike. MCP clients
    send `server.tool` and `server/tool`, agents prefix long server names: every turn fails.
    Each name the route's rule rejects (calls/tool_names.py has the rules and their sources) is
    renamed deterministically, in the tools, the history's calls and `tool_choice`, counted once
    per name; the new names and the client's go into the request phase's decisions, for
    ToolNamesRestored. The mapping is made from this request's own names, so it needs no store:
    the next request carries the client's names again and is renamed the same way."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        rule = TOOL_NAME_RULES.get(context.rules.tool_names)
        if rule is None:
            return False
        mapping = rename_request(body, rule)
        context.tool_names_back.update({new: original for original, new in mapping.items()})
        context.tally.count(RENAMED_KIND, len(mapping))
        return bool(mapping)


class ToolNamesRestored(Link):
    """The answer to a request whose tool names were renamed (ToolNamesRenamed) names its calls
    as the upstream was told: every call named with a new name gets the client's name back,
    streamed (the opening delta carries the name) or not, else the client runs no tool. Built
    only for an exchange whose request had names renamed."""

    def __init__(self, back: Mapping[str, str], tally: Tally) -> None:
        self._back = back
        """New name -> the client's, for this exchange's answer."""
        self._tally = tally

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        changed = False
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if isinstance(delta, dict):
                changed |= self._restore(delta)
        return [chunk] if changed else None

    def _restore(self, message: dict[str, Any]) -> bool:
        """Give a message's or delta's calls the client's names back."""
        functions = [call.get("function") for call in objects_in(message.get("tool_calls"))]
        functions.append(message.get("function_call"))  # the legacy single call
        changed = False
        for function in functions:
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                original = self._back.get(function["name"])
                if original is not None:
                    function["name"] = original
                    self._tally.count(RESTORED_KIND)
                    changed = True
        return changed
