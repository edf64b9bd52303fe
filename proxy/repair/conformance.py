"""The rules a repaired stream must meet for every client, as a checker.

Used by the test suite and by `streamfix replay` to report violations in any output.
"""

from __future__ import annotations

from typing import Any

from proxy.repair.chunks import choice_index, choices_of
from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder


def stream_chunks(body: bytes) -> list[dict[str, Any] | str]:
    """The JSON chunks of an SSE body, with `"[DONE]"` kept in place as a string."""
    decoder = SSEDecoder()
    items: list[dict[str, Any] | str] = []
    for event in decoder.feed(body) + decoder.flush():
        if event.data is None:
            continue
        if event.data.strip() == "[DONE]":
            items.append("[DONE]")
            continue
        try:
            items.append(json_codec.loads(event.data))
        except json_codec.JSONDecodeError:
            continue
    return items


def violations(body: bytes, emit: str = "atomic") -> list[str]:
    """Every way `body` breaks the client rules; empty when it is safe for every client."""
    items = stream_chunks(body)
    problems: list[str] = []
    done = [i for i, item in enumerate(items) if item == "[DONE]"]
    if len(done) != 1 or done[0] != len(items) - 1:
        problems.append(f"[DONE] must come once, last (found at {done} of {len(items)})")
    state = _ChoiceRules(emit)
    for number, item in enumerate(items):
        if isinstance(item, dict):
            for choice in choices_of(item):
                problems += [f"chunk {number}: {p}" for p in state.check(choice)]
    problems += state.at_end()
    return problems


class _ChoiceRules:
    def __init__(self, emit: str) -> None:
        self.emit = emit
        self.started: set[int] = set()
        self.finishes: dict[int, list[str]] = {}
        self.calls: dict[int, list[int]] = {}  # choice -> call indexes in order of appearance

    def check(self, choice: dict[str, Any]) -> list[str]:
        index = choice_index(choice)
        problems = []
        delta = choice.get("delta") or {}
        if "role" in delta and index in self.started:
            problems.append(f"choice {index}: role repeated after the first delta")
        if delta and index not in self.started and not delta.get("role"):
            # OpenAI's SDK stream helper takes the role from the first delta: message.role None
            problems.append(f"choice {index}: the first delta carries no role")
        if delta:
            self.started.add(index)
        if index in self.finishes and (delta or choice.get("finish_reason")):
            problems.append(f"choice {index}: data after its finish chunk")
        for entry in delta.get("tool_calls") or ():
            problems += self._check_call(index, entry)
        if choice.get("finish_reason") is not None:
            self.finishes.setdefault(index, []).append(choice["finish_reason"])
        return problems

    def _check_call(self, choice: int, entry: Any) -> list[str]:
        if not isinstance(entry, dict) or not isinstance(entry.get("function"), dict):
            return [f"choice {choice}: tool-call entry without a function object"]
        call_index = entry.get("index")
        if not isinstance(call_index, int):
            return [f"choice {choice}: tool-call entry without an integer index"]
        seen = self.calls.setdefault(choice, [])
        opening = call_index not in seen
        if opening:
            if call_index != len(seen):
                return [
                    f"choice {choice}: call index {call_index} out of order (expected {len(seen)})"
                ]
            seen.append(call_index)
        elif self.emit == "atomic":
            return [f"choice {choice}: call {call_index} sent in more than one delta"]
        if opening or self.emit == "atomic":
            return _identity_problems(choice, call_index, entry)
        extra = set(entry) - {"index", "function", "extra_content"}
        if extra or set(entry["function"]) - {"arguments"}:
            return [f"choice {choice}: follow-up delta of call {call_index} repeats identity"]
        return []

    def at_end(self) -> list[str]:
        problems = []
        for index in sorted(self.started | set(self.calls)):
            finishes = self.finishes.get(index, [])
            if len(finishes) != 1:
                problems.append(f"choice {index}: {len(finishes)} finish chunks, expected 1")
            elif self.calls.get(index) and finishes[0] not in ("tool_calls", "length"):
                # "length" with calls is what OpenAI itself sends when max_tokens cuts a turn
                # with calls in it: the cut is reported, never hidden.
                problems.append(f"choice {index}: sent calls but finished with {finishes[0]!r}")
        return problems


def _identity_problems(choice: int, call_index: int, entry: dict[str, Any]) -> list[str]:
    problems = []
    if not isinstance(entry.get("id"), str) or not entry["id"]:
        problems.append("no id")
    if entry.get("type") != "function":
        problems.append("type is not 'function'")
    function = entry["function"]
    if not isinstance(function.get("name"), str) or not function["name"]:
        problems.append("no function.name")
    if not isinstance(function.get("arguments"), str):
        problems.append("arguments is not a string")
    return [f"choice {choice}: call {call_index}: {p}" for p in problems]
