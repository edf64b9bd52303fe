"""Request side: every tool call answered once, every tool result answering a call."""

from __future__ import annotations

from collections import Counter
from typing import Any

from proxy.repair.calls.ids import generated_call_id, next_numbered_id
from proxy.repair.request_phase import RequestContext, RequestRepair
from proxy.repair.tally import Tally
from proxy.wire.json_shapes import objects_in

NO_RESULT = "No result was recorded for this tool call."


class HistoryRepair(RequestRepair):
    """Clients corrupt stored histories: Open WebUI (v0.11) keeps the calls of a round whose
    ids were reused, drops them, but stores all their results; strict upstreams then reject
    every later request (`messages with role 'tool' must be a response to a preceeding
    message with 'tool_calls'`, `… did not have response messages`). Per assistant block (an
    assistant message with tool calls and the tool messages after it) this drops results that
    answer no call of the block and second copies of a result, gives an unanswered call a
    short placeholder result, and renames later duplicate ids inside one message together
    with their results (a Kimi `functions.NAME:N` id keeps its shape, see `_fresh_id`). A valid
    history is not touched (its bytes go upstream as sent).
    """

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        healing = _Healing(context.tally)
        healed = healing.heal(messages)
        if not healing.changes:
            return False
        body["messages"] = healed
        return True


class _Healing:
    """One request's history being healed: the changes so far, and the ids already used."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self.changes = 0
        self._ids_used: set[str] = set()  # by earlier blocks of this request
        self._ids_in_conversation: set[str] = set()  # every id the request holds, as sent

    def heal(self, messages: list[Any]) -> list[Any]:
        self._ids_in_conversation = set(_ids_in(messages))
        out: list[Any] = []
        position = 0
        while position < len(messages):
            message = messages[position]
            position += 1
            if _is_tool_result(message):
                self._change("history_orphan_result_dropped", "a tool result with no call")
                continue
            out.append(message)
            if not _calls(message):
                continue
            results = []
            while position < len(messages) and _is_tool_result(messages[position]):
                results.append(messages[position])
                position += 1
            out.extend(self._heal_block(message, results))
        return out

    def _heal_block(self, assistant: dict[str, Any], results: list[dict[str, Any]]) -> list[Any]:
        changes_before = self.changes
        ids = self._unique_call_ids(assistant)
        # The k-th result carrying an id answers the k-th call that had that id.
        wanted: dict[str, list[str]] = {}
        for first, final in ids:
            wanted.setdefault(first, []).append(final)
        answered: dict[str, dict[str, Any]] = {}
        for result in results:
            original = result.get("tool_call_id")
            queue = wanted.get(original) if isinstance(original, str) else None
            if not queue:
                kind = (
                    "history_duplicate_result_dropped"
                    if original in wanted
                    else "history_orphan_result_dropped"
                )
                self._change(kind, "dropped a result for %r", original)
                continue
            final = queue.pop(0)
            if final != original:
                result = {**result, "tool_call_id": final}
            answered[final] = result
        healed = [answered[final] for _, final in ids if final in answered]
        for _, final in ids:
            if final not in answered:
                self._change("history_missing_result_added", "call %r had no result", final)
                healed.append({"role": "tool", "tool_call_id": final, "content": NO_RESULT})
        return healed if self.changes > changes_before else results

    def _change(self, kind: str, message: str, *args: Any) -> None:
        self.changes += 1
        self._tally.note(kind, message, *args)

    def _unique_call_ids(self, assistant: dict[str, Any]) -> list[tuple[str, str]]:
        """(id as sent, id to use) per call. An id already used, earlier in this message or by
        an earlier block (Kimi's per-round ids stored by a client that kept them), gets a new
        one, in place; Moonshot rejects a request that repeats an id."""
        seen: Counter[str] = Counter()
        pairs = []
        for call in _calls(assistant):
            original = call["id"]
            seen[original] += 1
            final = original
            if seen[original] > 1 or original in self._ids_used:
                final = self._fresh_id(original)
                call["id"] = final
                self._change("history_duplicate_id_renamed", "%r -> %r", original, final)
            pairs.append((original, final))
        self._ids_used.update(final for _, final in pairs)
        return pairs

    def _fresh_id(self, original: str) -> str:
        """Kimi's `functions.NAME:N` keeps its shape, with an N no id of the conversation has:
        the wire shows the shape, and Kimi's template reads the function's name from it. Any
        other id becomes `call_<24 hex>`."""
        taken = self._ids_in_conversation | self._ids_used
        numbered = next_numbered_id(original, taken)
        if numbered is not None and numbered not in taken:
            self._ids_used.add(numbered)
            return numbered
        attempt = 0
        while (candidate := generated_call_id("duplicate", original, attempt)) in self._ids_used:
            attempt += 1
        self._ids_used.add(candidate)
        return candidate


def _is_tool_result(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "tool"


def _calls(message: Any) -> list[dict[str, Any]]:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    return [c for c in objects_in(message.get("tool_calls")) if isinstance(c.get("id"), str)]


def _ids_in(messages: list[Any]) -> list[str]:
    ids = [c["id"] for message in messages for c in _calls(message)]
    return ids + [
        m["tool_call_id"]
        for m in messages
        if _is_tool_result(m) and isinstance(m.get("tool_call_id"), str)
    ]
