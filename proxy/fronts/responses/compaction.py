"""Codex's remote compaction over a chat upstream.

Codex (remote compaction v2, the only remote kind since `/responses/compact` was retired) asks
for a compaction with an ordinary `POST /v1/responses`: the whole history, its instructions
and tools as on any turn, and one input item `{"type": "compaction_trigger"}` last. It fails
the compaction unless the stream brings exactly one `compaction` output item
(`output_item.done`) and a `response.completed`; it then keeps the user messages it had and
that item, and sends the item back as-is in every later `input`:
`{"type": "compaction", "encrypted_content": "..."}` (an `id` beside it, or none).

A chat upstream has no such thing, so the proxy does it with the upstream itself: the chat
request is the translated conversation plus SUMMARY_INSTRUCTION as a last user message, without
the tools (the summary is text; a call would be nothing to run); the text it answers is the
summary. It is kept in the store under `compaction:{response id}` (tenant-scoped, the store's
TTL; cut at MAX_SUMMARY_BYTES so it always fits one value), and the item's `encrypted_content`
is a receipt token (fronts/receipt_tokens.py) naming that key: opaque, bound to the tenant and
upstream, never the summary itself. When the item comes back, it becomes the summary as a
user message behind SUMMARY_PREFIX, where the item stands: Codex's own local compaction
puts its summary in history the same way (a user message after the kept user messages), and a
system message in the middle of a transcript is refused by several chat templates.
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.responses.events import ResponsesEvents
from proxy.fronts.responses.output_items import Item, ItemKind, Shaped
from proxy.fronts.responses.translation import Message, Translation
from proxy.fronts.translator import CLEAN, Aborted, Clean, End

TRIGGER = "compaction_trigger"
ITEM = "compaction"
SUMMARISED_KIND = "responses_compaction_summarised"
RESTORED_KIND = "responses_compaction_restored"
MAX_SUMMARY_BYTES = 256 * 1024
"""A summary longer than this is cut: a quarter of the store's default value limit, so the
record always fits beside its key."""

SUMMARY_INSTRUCTION = (
    "Your context is about to be compacted: everything above will be replaced by what you write "
    "now. Write a handoff summary for yourself to continue this task without the earlier "
    "conversation. Include: the user's goals and constraints; what has been done so far, with "
    "the files, commands and tool results that matter (exact paths, names and values); "
    "decisions made and why; what failed and what was learned; what remains to be done, next "
    "step first. Be concise and concrete. Write only the summary: no tool calls, no preamble."
)
SUMMARY_PREFIX = (
    "The conversation before this point was compacted. This is the summary written of it, to "
    "continue from:\n\n"
)
_DROPPED = ("tools", "tool_choice", "parallel_tool_calls", "response_format")


def compaction_key(response_id: str) -> str:
    """The store key a compaction item's token names."""
    return f"compaction:{response_id}"


def summarising(translation: Translation) -> None:
    """The chat request of a compaction turn: the conversation, then the instruction to
    summarise it; without the tools."""
    chat = translation.chat
    for name in _DROPPED:
        chat.pop(name, None)
    chat["messages"].append({"role": "user", "content": SUMMARY_INSTRUCTION})
    translation.count(SUMMARISED_KIND)


def summary_message(summary: str) -> Message:
    """What the upstream sees where a compaction item came back."""
    return {"role": "user", "content": SUMMARY_PREFIX + summary}


def _compaction(item: Item, token: str | None) -> Shaped:
    return {"id": item.id, "type": ITEM, "encrypted_content": token or ""}


COMPACTION = ItemKind("compaction", "cmp_", "", "", "", _compaction)
"""Never streamed: added and done once the summary is whole."""


class CompactionEvents(ResponsesEvents):
    """A compaction turn's events: `response.created`, `in_progress` while the upstream
    writes, then exactly one `compaction` item and the terminal event. The upstream's text is
    the summary (reasoning and calls are not shown: the item is all Codex reads)."""

    def __init__(self, translation: Translation, request: dict[str, Any]) -> None:
        super().__init__(translation, request)
        self._summary: list[str] = []

    def _delta(self, delta: dict[str, Any]) -> list[bytes]:
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._summary.append(text)
        return []

    @property
    def summary(self) -> str:
        text = "".join(self._summary).strip()
        encoded = text.encode()
        if len(encoded) > MAX_SUMMARY_BYTES:
            text = encoded[:MAX_SUMMARY_BYTES].decode("utf-8", "ignore")
        return text

    def settle(self, end: End = CLEAN) -> list[bytes]:
        out = self.start()
        if isinstance(end, Clean) and not self.summary:
            end = Aborted("the upstream wrote no summary for the compaction", "empty_summary")
        if self.token is None and isinstance(end, Clean):
            end = Aborted("a compaction is kept per tenant: the request had no key", "no_tenant")
        if not isinstance(end, Clean):
            return out + super().settle(end)
        item = self._open(COMPACTION)
        out.append(self._writer.added(item, self.token))
        item.open = False
        self._current = None
        out.append(self._writer.item_done(item, self.token))
        self.status = "completed"
        return out

    def turn(self) -> dict[str, Any] | None:
        return None  # no assistant turn: the record is the summary (records())

    def records(self) -> dict[str, dict[str, Any]]:
        """The summary under the key the token names, once the compaction completed."""
        if self.status != "completed" or self.token is None:
            return {}
        return {compaction_key(self.id): {"summary": self.summary}}
