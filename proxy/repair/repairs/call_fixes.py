"""The fixes ToolCallRepair applies to whole calls just before it sends them.

They are not links of their own: each needs the whole call before anything of it goes out (its
arguments complete, its name, its id), and the mender reads across a choice's calls at once,
while a link only sees what earlier links sent. ToolCallRepair applies them, in this order, at
emission time: the mender, then the double-decoding (on mended arguments), then, per call as it
opens, the name and the id (the id is seeded by the name and the final arguments).
"""

from __future__ import annotations

from proxy.repair.calls.arguments import ArgumentMender
from proxy.repair.calls.assembly import ToolCall
from proxy.repair.calls.ids import generated_call_id
from proxy.repair.calls.names import unambiguous_tool_name
from proxy.repair.forwarded import Forwarded
from proxy.repair.tally import Tally


class ArgumentMending:
    """vLLM's parsers under load let the tail of call N's arguments arrive under call N+1, and
    some upstreams send a call with empty arguments: both calls fail to parse, and clients drop
    or error on them. A choice's whole calls not yet sent get their arguments back (calls/
    arguments.py); each change is counted by what it mended, and calls still broken are noted.
    A call the client already has part of (auto emission streamed it as received) is mended
    only by adding to what it got: a leaked tail moves forward, so its own call only grows."""

    _mender = ArgumentMender()

    def __init__(self, tally: Tally) -> None:
        self._tally = tally

    def apply(self, calls: list[ToolCall]) -> None:
        texts = [call.arguments for call in calls]
        repaired = self._mender.repair(texts)
        if repaired is None:
            broken = sum(not call.arguments_complete() for call in calls)
            if broken:
                self._tally.note(
                    "arguments_unparseable", "%d call(s) passed on as received", broken
                )
            return
        if not all(call.fixable(after) for call, after in zip(calls, repaired, strict=True)):
            # A call already streamed as received would need its sent text taken back.
            self._tally.note("arguments_unparseable", "streamed call(s) passed on as received")
            return
        for call, before, after in zip(calls, texts, repaired, strict=True):
            if after != before:
                self._tally.count("arguments_empty" if not before else "arguments_leak")
                call.amend(after)


class DoubleDecoding:
    """Some upstreams encode a call's arguments once too often: the whole object sent as a JSON
    string, or a property the schema wants as an object or array sent as its JSON text. Decoded
    once where the declared tool's schema wants the decoded shape (and only then: see
    DeclaredTools.reshaped), counted `arguments_decoded_twice`."""

    def __init__(self, forwarded: Forwarded, tally: Tally) -> None:
        self._forwarded = forwarded
        self._tally = tally

    def apply(self, call: ToolCall) -> None:
        if not isinstance(call.name, str):
            return
        declared = self._forwarded.declared_tools  # read once, and only when a call needs it
        if declared is None:
            return
        reshaped = declared.reshaped(call.name, call.arguments)
        if reshaped is None or not call.fixable(reshaped):
            return
        self._tally.count("arguments_decoded_twice")
        if reshaped != call.arguments:
            call.amend(reshaped)


class NameInference:
    """vLLM sometimes drops a call's `name`, and a client cannot run a call without one. The
    name is taken only when the request leaves no doubt (the one `tool_choice` names, the only
    declared tool, the only one whose parameters fit the arguments); otherwise the call is left
    out, noted once, never sent nameless."""

    def __init__(self, forwarded: Forwarded, tally: Tally) -> None:
        self._forwarded = forwarded
        self._tally = tally

    def name(self, call: ToolCall, choice: int) -> str | None:
        if call.name is not None:
            return call.name
        name = unambiguous_tool_name(self._forwarded.body, call.arguments)
        if name is None:
            self._tally.note(
                "tool_call_without_name",
                "left out call %d of choice %d: no name and the request does not imply one",
                call.index,
                choice,
            )
        else:
            self._tally.count("tool_call_name_inferred")
        return name


class IdMinting:
    """vLLM drops a call's `id`, and the OpenAI SDK and the AI SDK then fail (`Expected 'id' to
    be a string`). A call without one gets an id derived from the stream's id, the turn, the
    call's place, name and arguments: deterministic, so replaying an exchange gives the same
    ids. Counted `tool_call_id_generated`."""

    def __init__(self, forwarded: Forwarded, tally: Tally) -> None:
        self._forwarded = forwarded
        self._tally = tally

    def mint(self, call: ToolCall, stream_id: object, choice: int, name: str) -> str:
        if call.id is not None:
            return call.id
        self._tally.count("tool_call_id_generated")
        return generated_call_id(
            stream_id, self._forwarded.turn, choice, call.index, name, call.arguments
        )


class CallFixes:
    """The fixes above for one exchange, built when its first call is about to go out (most
    answers carry none)."""

    def __init__(self, forwarded: Forwarded, tally: Tally) -> None:
        self.mending = ArgumentMending(tally)
        self.decoding = DoubleDecoding(forwarded, tally)
        self.naming = NameInference(forwarded, tally)
        self.minting = IdMinting(forwarded, tally)
