"""Deliver every tool call complete and valid, however the upstream spread it over deltas."""

from __future__ import annotations

from typing import Any

from proxy.repair.calls.assembly import AssemblyBudget, CallAssembler, ToolCall
from proxy.repair.chunks import choice_index, choices_of, envelope, new_chunk, without_empty_choices
from proxy.repair.forwarded import Forwarded
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.repairs.call_fixes import CallFixes
from proxy.repair.tally import Tally


class ToolCallRepair(Link):
    """Gemini streams calls without `index` (sometimes fragmented, sometimes with a lone
    signature delta); Vertex changes `index` for one id; vLLM drops `id` and `name`. Clients
    then crash (`Expected 'id' to be a string`), drop the calls or merge parallel calls into
    broken JSON. This repair assembles the calls and re-emits them with full identity:

    - ``atomic``: each call once, complete, right before its choice's finish chunk, so that
      even clients that validate every delta for index/id/type/name accept it;
    - ``incremental``: an opening delta with index/id/type/name, then argument fragments.

    Before a call goes out whole, the fixes of call_fixes.py apply to it: arguments mended
    across the choice's calls, arguments decoded once where they were encoded twice, a missing
    name inferred (a call whose name cannot be known is left out and counted, never sent
    nameless), a missing id minted.
    Transcripts: every `gemini_*`, `vertex_*` and `vllm_*` one in tests/transcripts.
    """

    def __init__(
        self,
        forwarded: Forwarded,
        tally: Tally,
        emit: str = "atomic",
        max_buffered_bytes: int | None = None,
    ) -> None:
        self._forwarded = forwarded
        self._tally = tally
        self._budget = AssemblyBudget(max_buffered_bytes)
        self._incremental = emit == "incremental"
        self._call_fixes: CallFixes | None = None
        self._choices: dict[int, CallAssembler] = {}
        self._envelope: dict[str, Any] = {}

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        before: list[Chunk] = []
        changed = False
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if isinstance(delta, dict) and "tool_calls" in delta:
                changed = True
                self._take_entries(choice, delta)
            if choice.get("finish_reason") and self._pending(choice_index(choice)):
                changed = True
                self._envelope = envelope(chunk)
                before.extend(self._flush(choice_index(choice)))
        if not changed:
            return None
        self._envelope = envelope(chunk)
        # A chunk left empty once its fragments are taken goes too: they go out with their call.
        return before + without_empty_choices(chunk)

    async def on_end(self) -> list[Chunk]:
        closing: list[Chunk] = []
        for index in list(self._choices):
            closing.extend(self._flush(index))
        return closing

    def _take_entries(self, choice: dict[str, Any], delta: dict[str, Any]) -> None:
        entries = delta.pop("tool_calls")
        if not isinstance(entries, list) or not entries:
            return
        index = choice_index(choice)
        assembler = self._choices.get(index)
        if assembler is None:
            assembler = self._choices[index] = CallAssembler(self._budget, self._tally.count)
        touched = assembler.add(entries)
        # Calls that come with their choice's finish are whole (a non-streamed message's, or
        # a last delta): nothing is left to stream of them, so they go out as atomic mode
        # sends them, mended, just before that finish.
        if self._incremental and not choice.get("finish_reason"):
            out = [entry for call in touched if (entry := self._incremental_entry(index, call))]
            if out:
                delta["tool_calls"] = out

    def _pending(self, index: int) -> list[ToolCall]:
        assembler = self._choices.get(index)
        if assembler is None:
            return []
        return [call for call in assembler.calls if _unsent(call)]

    def _flush(self, index: int) -> list[Chunk]:
        """Everything not yet sent of this choice's calls, one chunk per call."""
        self._repair_arguments(self._pending(index))
        chunks = []
        for call in self._pending(index):
            entry = self._complete_entry(index, call) if not call.opened else _rest_entry(call)
            if entry is not None:
                chunks.append(
                    new_chunk(self._envelope, {"index": index, "delta": {"tool_calls": [entry]}})
                )
        return chunks

    def _repair_arguments(self, calls: list[ToolCall]) -> None:
        """Whole calls not sent yet (atomic emission) can still have their arguments fixed."""
        unsent = [call for call in calls if not call.opened and not call.is_bare()]
        fixes = self._fixes()
        fixes.mending.apply(unsent)
        for call in unsent:
            fixes.decoding.apply(call)

    def _fixes(self) -> CallFixes:
        if self._call_fixes is None:
            self._call_fixes = CallFixes(self._forwarded, self._tally)
        return self._call_fixes

    def _incremental_entry(self, index: int, call: ToolCall) -> dict[str, Any] | None:
        if not call.opened:
            # Hold the call back until its name is known: clients need it on the opening delta.
            return self._complete_entry(index, call) if call.name else None
        return _rest_entry(call)

    def _complete_entry(self, choice: int, call: ToolCall) -> dict[str, Any] | None:
        """The call with its identity, and every argument fragment received so far."""
        if call.is_bare():
            call.opened = True
            self._tally.note(
                "orphan_extra_content", "no call for extra_content in choice %d", choice
            )
            return None
        name = self._fixes().naming.name(call, choice)
        if name is None:
            call.opened = True  # never retried: it is reported once and stays out
            call.sent_fragments = len(call.fragments)
            return None
        call.name = name
        call.id = self._fixes().minting.mint(call, self._envelope.get("id"), choice, name)
        self._count_identity(call)
        entry: dict[str, Any] = {
            "index": call.index,
            "id": call.id,
            "type": "function",
            "function": {"name": name, "arguments": call.arguments},
        }
        if call.extra_content:
            entry["extra_content"] = call.extra_content
        call.opened = True
        call.sent_fragments = len(call.fragments)
        call.sent_extra_content = call.extra_content
        return entry

    def _count_identity(self, call: ToolCall) -> None:
        """What the client gets that the upstream did not say: an index (none, or another
        number), a type, and in atomic mode one whole call where several deltas came."""
        if not call.upstream_indexes:
            self._tally.count("tool_call_index_added")
        elif call.index not in call.upstream_indexes:
            self._tally.count("tool_call_index_renumbered")
        if not call.typed:
            self._tally.count("tool_call_type_added")
        if call.stringified:
            self._tally.count("arguments_object_stringified")
        if call.entries > 1 and not self._incremental:
            self._tally.count("tool_call_fragments_assembled")


def _unsent(call: ToolCall) -> bool:
    return (
        not call.opened
        or call.sent_fragments < len(call.fragments)
        or call.sent_extra_content != call.extra_content
    )


def _rest_entry(call: ToolCall) -> dict[str, Any] | None:
    """A follow-up delta of an opened call: new argument text, and a signature that came late."""
    if call.name is None:
        return None  # left out for good
    text = "".join(call.fragments[call.sent_fragments :])
    late_extra = call.extra_content if call.extra_content != call.sent_extra_content else None
    if not text and late_extra is None:
        return None
    entry: dict[str, Any] = {"index": call.index, "function": {"arguments": text}}
    if late_extra:
        entry["extra_content"] = late_extra
    call.sent_fragments = len(call.fragments)
    call.sent_extra_content = call.extra_content
    return entry
