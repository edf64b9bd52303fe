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

    - ``auto`` (the default): each call decided from what the wire shows. A call streamed as
      OpenAI streams it (an opening delta with index, id, type and name, then deltas with that
      index and argument text only) that nothing could need to change goes on as the bytes
      received, fragments included (`_relayable` says when); any other call, and every later
      call of its choice, is held and sent as ``atomic`` sends it;
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
        emit: str = "auto",
        max_buffered_bytes: int | None = None,
    ) -> None:
        self._forwarded = forwarded
        self._tally = tally
        self._budget = AssemblyBudget(max_buffered_bytes)
        self._incremental = emit == "incremental"
        self._auto = emit == "auto"
        self._held: set[int] = set()
        """Choices (auto emission) with a call held: every later call of theirs waits too, so
        calls reach the client in index order."""
        self._finished: set[int] = set()
        """Choices whose finish came: their streamed calls were mended then, if at all."""
        self._begun: set[int] = set()
        """Relayed calls (auto emission), by identity, whose argument text
        has begun, with `{`: later fragments need no look at what came before."""
        self._call_fixes: CallFixes | None = None
        self._choices: dict[int, CallAssembler] = {}
        self._envelope: dict[str, Any] = {}

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        before: list[Chunk] = []
        changed = False
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            relayed = self._auto and isinstance(delta, dict) and self._relayed(choice, delta)
            if isinstance(delta, dict) and "tool_calls" in delta and not relayed:
                changed = True
                self._take_entries(choice, delta)
            if choice.get("finish_reason") and self._unfinished(choice_index(choice)):
                changed = True
                self._envelope = envelope(chunk)
                before.extend(self._flush(choice_index(choice)))
            if choice.get("finish_reason"):
                self._finished.add(choice_index(choice))
        if not changed:
            return None
        self._envelope = envelope(chunk)
        # A chunk left empty once its fragments are taken goes too: they go out with their call.
        return before + without_empty_choices(chunk)

    async def on_end(self) -> list[Chunk]:
        closing: list[Chunk] = []
        for index in list(self._choices):
            if self._unfinished(index):
                closing.extend(self._flush(index))
        return closing

    def _assembler(self, index: int) -> CallAssembler:
        assembler = self._choices.get(index)
        if assembler is None:
            assembler = self._choices[index] = CallAssembler(self._budget, self._tally.count)
        return assembler

    def _relayed(self, choice: dict[str, Any], delta: dict[str, Any]) -> bool:
        """Auto emission: take a delta's entry as received when `_relayable`, the chunk left
        untouched (its bytes go on as they came); False leaves it to be held."""
        entries = delta.get("tool_calls")
        if entries is None:
            return False
        index = choice_index(choice)
        if index in self._held or choice.get("finish_reason"):
            # Calls that come with their finish are whole: fixed, if at all, as atomic ones.
            return False
        assembler = self._assembler(index)
        if not (
            isinstance(entries, list)
            and len(entries) == 1
            and self._relayable(assembler.calls, entries[0])
        ):
            self._held.add(index)
            return False
        for call in assembler.add(entries):
            call.opened = True
            call.sent_fragments = len(call.fragments)
            if call.fragments and call.fragments[-1].strip():
                self._begun.add(id(call))  # its text opened an object: never looked at again
        return True

    def _relayable(self, calls: list[ToolCall], entry: Any) -> bool:
        """Whether an entry can go to the client as received, judged from the wire alone.

        Opening the next call: an OpenAI-shaped opening (index = the call's place, a new id,
        `type: "function"`, a name, string arguments, nothing else) whose call no fix could
        change: the previous call is complete (else its tail may be leaking into this one,
        vLLM's quirk, which only the whole pair can mend), the declared schema wants no object
        or array property (a property sent as its JSON text can only be told once whole), and
        its arguments open an object (a `"` would be the whole object encoded as a string).
        Continuing the latest call: its index and argument text only, still opening an object.
        Anything else (Gemini's indexless calls, vLLM's nameless or idless ones, a signature,
        a renumbered index) is held."""
        if not isinstance(entry, dict):
            return False
        upstream_index = entry.get("index")
        function = entry.get("function")
        if type(upstream_index) is not int or not isinstance(function, dict):
            return False
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            return False
        if upstream_index == len(calls):
            call_id, name = entry.get("id"), function.get("name")
            return (
                entry.keys() <= _OPENING_KEYS
                and function.keys() <= _FUNCTION_KEYS
                and entry.get("type") == "function"
                and isinstance(call_id, str)
                and call_id != ""
                and isinstance(name, str)
                and name != ""
                and all(call.id != call_id for call in calls)
                and (not calls or calls[-1].arguments_complete())
                and not self._may_reshape(name)
                and _opens_object(arguments)
            )
        latest = calls[-1] if calls else None
        return (
            latest is not None
            and latest.upstream_indexes == {upstream_index}
            and latest.index == upstream_index
            and entry.keys() == _FOLLOW_UP_KEYS
            and function.keys() == _ARGUMENTS_ONLY
            and (id(latest) in self._begun or _opens_object(arguments))
        )

    def _may_reshape(self, name: str) -> bool:
        declared = self._forwarded.declared_tools
        return declared is not None and declared.may_reshape(name)

    def _unfinished(self, index: int) -> bool:
        """Something of this choice's calls is still to send or fix: a held call, or (auto
        emission) a streamed call whose arguments do not parse (a leaked tail, or empty)."""
        if self._pending(index):
            return True
        assembler = self._choices.get(index)
        return (
            self._auto
            and assembler is not None
            and index not in self._finished
            and any(not call.arguments_complete() for call in assembler.calls)
        )

    def _take_entries(self, choice: dict[str, Any], delta: dict[str, Any]) -> None:
        entries = delta.pop("tool_calls")
        if not isinstance(entries, list) or not entries:
            return
        index = choice_index(choice)
        assembler = self._assembler(index)
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
        self._repair_arguments(index)
        chunks = []
        for call in self._pending(index):
            entry = self._complete_entry(index, call) if not call.opened else _rest_entry(call)
            if entry is not None:
                chunks.append(
                    new_chunk(self._envelope, {"index": index, "delta": {"tool_calls": [entry]}})
                )
        return chunks

    def _repair_arguments(self, index: int) -> None:
        """Whole calls not sent yet (atomic emission) can still have their arguments fixed; in
        auto emission so can a streamed one, by adding to what it sent (the mender reads every
        call of the choice: a streamed call's tail may have leaked into a held one)."""
        pending = self._pending(index)
        if self._auto:
            calls = self._choices[index].calls
            mended = [call for call in calls if not call.is_bare()]
            decoded = [call for call in pending if not call.is_bare()]
        else:
            mended = decoded = [call for call in pending if not call.opened and not call.is_bare()]
        fixes = self._fixes()
        fixes.mending.apply(mended)
        for call in decoded:
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


_OPENING_KEYS = frozenset({"index", "id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
_FOLLOW_UP_KEYS = {"index", "function"}
_ARGUMENTS_ONLY = {"arguments"}


def _opens_object(arguments: str) -> bool:
    """Argument text that is empty so far or opens a JSON object, as arguments should."""
    return arguments.lstrip()[:1] in ("", "{")


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
