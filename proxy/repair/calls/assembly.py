"""Matching tool-call delta entries to the calls they belong to, for one choice.

Upstreams disagree on how a call is spread over deltas: OpenAI keys fragments by `index`,
Gemini sends no `index` at all, Vertex changes `index` for one id, vLLM sometimes sends neither
`id` nor `name`. The rules below, applied in order, cover every shape seen (the transcripts in
tests/transcripts/).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from proxy.wire import json_codec
from proxy.wire.json_shapes import integer, objects_in
from proxy.wire.limits import LimitExceeded

Count = Callable[[str, int], None]


def _uncounted(kind: str, amount: int) -> None:
    """The default `count`: an assembler used on its own, with no exchange to book on."""


@dataclass(slots=True)
class ToolCall:
    index: int
    """Position in the choice as the client sees it: 0, 1, 2… in order of first appearance."""
    id: str | None = None
    name: str | None = None
    fragments: list[str] = field(default_factory=list)
    extra_content: dict[str, Any] | None = None
    opened: bool = False
    """The client has been sent this call's opening delta (or the whole call)."""
    sent_fragments: int = 0
    sent_extra_content: dict[str, Any] | None = None
    upstream_indexes: set[int] = field(default_factory=set)
    entries: int = 0
    """Delta entries merged into it: more than one means the client gets it assembled."""
    typed: bool = False
    """An entry said `"type": "function"` (Gemini and vLLM often say nothing)."""
    stringified: bool = False
    """An entry sent the arguments object itself, which the client gets as JSON text."""

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)

    @property
    def sent_arguments(self) -> str:
        """The argument text the client already has: a fix may only add to it."""
        return "".join(self.fragments[: self.sent_fragments])

    def amend(self, arguments: str) -> None:
        """Fixed arguments that begin with what was sent, or follow sent whitespace (JSON
        allows it before a value): what was sent stays, the rest goes next (`fixable` says
        whether they can)."""
        sent = self.sent_arguments
        rest = arguments[len(sent) :] if arguments.startswith(sent) else arguments
        self.fragments = [*self.fragments[: self.sent_fragments], *([rest] if rest else [])]

    def fixable(self, arguments: str) -> bool:
        if self.sent_fragments == 0:
            return True
        sent = self.sent_arguments
        return arguments.startswith(sent) or not sent.strip()

    def is_bare(self) -> bool:
        """Nothing but `extra_content` so far: a signature that arrived before its call."""
        return self.id is None and self.name is None and not self.fragments

    def arguments_complete(self) -> bool:
        return json_codec.parses(self.arguments)

    def merge(self, entry: dict[str, Any]) -> int:
        """Take one delta entry; return the bytes of arguments it added."""
        added = 0
        self.entries += 1
        self.typed |= entry.get("type") == "function"
        if self.id is None and _nonempty_str(entry.get("id")):
            self.id = entry["id"]
        function = entry.get("function")
        if isinstance(function, dict):
            if self.name is None and _nonempty_str(function.get("name")):
                self.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, dict):
                # Some servers send the arguments object itself; the client needs the string.
                arguments = json_codec.dumps(arguments).decode()
                self.stringified = True
            if isinstance(arguments, str) and arguments:
                self.fragments.append(arguments)
                added = len(arguments)
        extra = entry.get("extra_content")
        if isinstance(extra, dict):
            self.extra_content = _deep_merge(self.extra_content or {}, extra)
        return added


class CallsTooLarge(LimitExceeded):
    """The calls being assembled outgrew their budget (`tool_calls.max_buffered_bytes`)."""

    code = "tool_calls_too_large"


# What one held fragment costs beyond its characters (the str object, its list slot): an
# upstream sending a million one-byte fragments must pay for them too.
FRAGMENT_OVERHEAD = 64


class AssemblyBudget:
    """The bytes of tool-call arguments one exchange may hold while assembling its calls. Each
    fragment must be held until its call is whole, so without a bound an upstream could grow
    one call to any size, whatever `max_event_bytes` says of single events."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0

    def charge(self, size: int) -> None:
        self.used += size + FRAGMENT_OVERHEAD
        if self.limit is not None and self.used > self.limit:
            raise CallsTooLarge(f"the tool calls being assembled exceeded {self.limit} bytes")


class CallAssembler:
    """The calls of one choice, built up from delta entries in arrival order."""

    def __init__(self, budget: AssemblyBudget | None = None, count: Count = _uncounted) -> None:
        self._budget = budget or AssemblyBudget(None)
        self._count = count
        self.calls: list[ToolCall] = []
        self._by_id: dict[str, ToolCall] = {}
        self._by_upstream_index: dict[int, ToolCall] = {}
        self._opened: ToolCall | None = None

    def add(self, entries: list[Any]) -> list[ToolCall]:
        """Merge one delta's `tool_calls` entries; return the calls they touched, in order."""
        dicts = objects_in(entries)
        positional = len(dicts) > 1
        # By identity: calls compare by value (a dataclass), and a non-streamed message's
        # calls all come in one delta, thousands of them from a hostile upstream.
        touched: dict[int, ToolCall] = {}
        for position, entry in enumerate(dicts):
            call = self._match(entry, position if positional else None)
            self._budget.charge(call.merge(entry))
            if (index := integer(entry.get("index"))) is not None:
                call.upstream_indexes.add(index)
            if call.id is not None and (call is self._opened or call.id not in self._by_id):
                self._by_id[call.id] = call  # a reused id now means its newest call
            touched.setdefault(id(call), call)
        return list(touched.values())

    def _match(self, entry: dict[str, Any], position: int | None) -> ToolCall:
        call_id = entry.get("id")
        index = integer(entry.get("index"))
        if _nonempty_str(call_id):
            # By id first: Vertex changes `index` for one id, and ids are what calls are.
            known = self._by_id.get(call_id)
            if known is None or _reuses_id(entry, index, known):
                return self._open(entry)
            if index is not None and index not in known.upstream_indexes:
                self._count("tool_call_index_change_merged", 1)
            return known
        if index is not None:
            return self._by_upstream_index.get(index) or self._open(entry)
        if position is not None and position < len(self.calls):
            return self.calls[position]  # several indexless entries continue the open calls
        if self.calls and _carries_only_extra_content(entry):
            return self.calls[0]  # Gemini: a lone signature belongs to the batch's first call
        latest = self.calls[-1] if self.calls else None
        if latest is None or _names_another_call(entry, latest):
            return self._open(entry)
        return latest  # an indexless fragment continues the latest call

    def _open(self, entry: dict[str, Any]) -> ToolCall:
        if self.calls and self.calls[-1].is_bare():
            call = self.calls[-1]  # the call a signature-only delta was waiting for
        else:
            call = ToolCall(index=len(self.calls))
            self.calls.append(call)
        self._opened = call
        index = integer(entry.get("index"))
        if index is not None:
            self._by_upstream_index[index] = call
            call.upstream_indexes.add(index)
        return call


def _nonempty_str(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def _reuses_id(entry: dict[str, Any], index: int | None, known: ToolCall) -> bool:
    """A complete call's id opening a call under a new index is a second call with the same
    id (an upstream numbering badly), not Vertex moving one call's index mid-way."""
    function = entry.get("function")
    named = isinstance(function, dict) and _nonempty_str(function.get("name"))
    return (
        named
        and index is not None
        and index not in known.upstream_indexes
        and known.arguments_complete()
    )


def _carries_only_extra_content(entry: dict[str, Any]) -> bool:
    function = entry.get("function")
    has_function = isinstance(function, dict) and (
        function.get("name") or function.get("arguments")
    )
    return isinstance(entry.get("extra_content"), dict) and not has_function


def _names_another_call(entry: dict[str, Any], latest: ToolCall) -> bool:
    """An indexless, id-less entry with a name opens a new call once the latest one is complete:
    otherwise two calls whose ids an intermediary blanked would merge into `{…}{…}`."""
    function = entry.get("function")
    named = isinstance(function, dict) and _nonempty_str(function.get("name"))
    return named and latest.name is not None and latest.arguments_complete()


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
