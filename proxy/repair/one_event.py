"""A non-streamed completion as a one-event stream, and the repaired stream folded back.

Every repair is written once, for a stream: a non-streamed `chat.completion` goes through the
same links as the one chunk a stream would have carried it in (each choice's `message` as its
`delta`, its `finish_reason` on the same chunk, every other key kept), and what the links send
for it (that chunk, changed or split, and their closing chunks) is folded back into one
completion body: texts concatenated, calls merged by `index`, the last finish of each choice.

A message's calls carry no `index` (a list needs none), but the links key calls by it, so each
call gets its position for the trip only. Calls come out of ToolCallRepair rebuilt with only
the fields it knows; the fold puts back, from the upstream's own call at that position, every
key it did not send (a vendor's extra field), in the upstream's key order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proxy.repair.chunks import choice_index
from proxy.wire.json_shapes import integer

# Delta fields that stream as text pieces: folded back by concatenation.
_TEXT_FIELDS = frozenset({"content", "reasoning_content", "reasoning", "refusal"})


class OneEvent:
    """One non-streamed completion on its trip through the stream links: `chunk` is what the
    links are handed; `fold` turns what they sent back into a completion body."""

    def __init__(self, body: dict[str, Any]) -> None:
        self._body = body
        self._message_calls: dict[int, list[dict[str, Any]]] = {}
        """Per choice, the upstream's own function calls, by the trip's index."""
        self._kept_out: dict[int, list[tuple[int, Any]]] = {}
        """Per choice, the calls the links are not handed, by their place in the message."""
        self._places: dict[int, list[int]] = {}
        """Per choice, the trip's index -> the call's place in the message."""
        self._assumed_stop: set[int] = set()
        """Choices that said no finish and have no calls: "stop" for the trip only."""
        chunk = dict(body)
        chunk["object"] = "chat.completion.chunk"
        choices = body.get("choices")
        if isinstance(choices, list):
            # A choice without a message (a chunk's shape served as a body, garbage) has nothing
            # for the links: it is not handed to them, and goes out as received.
            chunk["choices"] = [self._streamed(c) for c in choices if _for_the_links(c)]
        self.chunk = chunk

    def _streamed(self, choice: dict[str, Any]) -> dict[str, Any]:
        """The choice as a stream's: its message as the delta, at the same place. Copied down
        to each call's `function`, the objects the links edit in place, so the body itself
        stays as received (the fold compares with it)."""
        streamed: dict[str, Any] = {}
        for key, value in choice.items():
            if key == "delta":
                continue  # a chunk's field in a completion: not the links' to read (kept as is)
            if key == "message":
                key, value = "delta", self._delta(choice_index(choice), value)
            streamed[key] = value
        if streamed.get("finish_reason") is None and not streamed["delta"].get("tool_calls"):
            # A whole body is a complete answer, not a stream cut short: without calls it ended
            # as "stop" would, so no link supplies a finish, and the upstream's null comes back
            # unless a link changed it (calls found in the text: "tool_calls").
            streamed["finish_reason"] = "stop"
            self._assumed_stop.add(choice_index(choice))
        return streamed

    def _delta(self, index: int, message: dict[str, Any]) -> dict[str, Any]:
        delta = dict(message)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            trip = self._message_calls[index] = []
            places = self._places[index] = []
            kept_out = self._kept_out[index] = []
            for place, call in enumerate(calls):
                if _is_function_call(call):
                    trip.append(call)
                    places.append(place)
                else:
                    # A custom tool's call (`"type": "custom"`) or garbage: no function for the
                    # links to complete, so not theirs to name or drop; back at its place.
                    kept_out.append((place, call))
            delta["tool_calls"] = [_with_index(call, k) for k, call in enumerate(trip)]
        return delta

    def fold(self, chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """The completion the links' `chunks` say, in the body's own key order; `object` and
        every top-level key other than `choices` as received."""
        messages: dict[int, MergedDeltas] = {}
        finishes: dict[int, Any] = {}
        for chunk in chunks:
            choices = chunk.get("choices")
            for choice in choices if isinstance(choices, list) else ():
                if not isinstance(choice, dict):
                    continue
                index = choice_index(choice)
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    messages.setdefault(index, MergedDeltas()).add(delta)
                if choice.get("finish_reason") is not None:
                    finishes[index] = choice["finish_reason"]
        folded = dict(self._body)
        choices = self._body.get("choices")
        if isinstance(choices, list):
            folded["choices"] = [
                self._folded_choice(c, messages, finishes) if isinstance(c, dict) else c
                for c in choices
            ]
        return folded

    def _folded_choice(
        self, choice: dict[str, Any], messages: dict[int, MergedDeltas], finishes: dict[int, Any]
    ) -> dict[str, Any]:
        index = choice_index(choice)
        folded = dict(choice)
        message = choice.get("message")
        if not _for_the_links(choice):
            return folded  # not handed to the links
        assert isinstance(message, dict)
        built = messages.get(index)
        if built is not None:
            folded["message"] = built.message(
                message,
                self._message_calls.get(index, []),
                self._places.get(index, []),
                self._kept_out.get(index, []),
            )
        assumed = index in self._assumed_stop and finishes.get(index) == "stop"
        if index in finishes and not assumed:
            folded["finish_reason"] = finishes[index]
        return folded


def _for_the_links(choice: Any) -> bool:
    """A choice with a message, unless its calls are all ones the links must not touch (then
    its finish, "tool_calls", would read to them as a finish without calls)."""
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return False  # a chunk's shape served as a body, garbage: as received
    calls = choice["message"].get("tool_calls")
    return not (isinstance(calls, list) and calls and not any(map(_is_function_call, calls)))


def _is_function_call(call: Any) -> bool:
    return isinstance(call, dict) and isinstance(call.get("function"), dict)


def _with_index(call: dict[str, Any], position: int) -> dict[str, Any]:
    trip = dict(call)
    trip["index"] = position
    if isinstance(call.get("function"), dict):
        trip["function"] = dict(call["function"])
    return trip


class MergedDeltas:
    """One choice's deltas merged as a client accumulates them."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.calls: dict[Any, dict[str, Any]] = {}
        """By index, in order of first appearance."""

    def add(self, delta: dict[str, Any]) -> None:
        for key, value in delta.items():
            if key == "tool_calls" and isinstance(value, list):
                self.fields.setdefault(key, None)  # its place among the keys
                for entry in value:
                    self._add_call(entry)
            elif key in _TEXT_FIELDS and isinstance(value, str):
                earlier = self.fields.get(key)
                self.fields[key] = (earlier if isinstance(earlier, str) else "") + value
            elif self.fields.get(key) is None:
                self.fields[key] = value

    def _add_call(self, entry: Any) -> None:
        if not isinstance(entry, dict):
            return
        index = integer(entry.get("index"))
        key: Any = index if index is not None else ("unindexed", len(self.calls))
        known = self.calls.get(key)
        if known is None:
            self.calls[key] = {
                k: dict(v) if k == "function" and isinstance(v, dict) else v
                for k, v in entry.items()
            }
            return
        for field, value in entry.items():
            if field == "function" and isinstance(value, dict):
                function = known.setdefault("function", {})
                for name, part in value.items():
                    if name == "arguments" and isinstance(part, str):
                        earlier = function.get(name)
                        function[name] = (earlier if isinstance(earlier, str) else "") + part
                    elif function.get(name) is None:
                        function[name] = part
            elif field == "extra_content" or known.get(field) is None:
                known[field] = value  # a late signature is the whole merged one

    def message(
        self,
        original: dict[str, Any],
        upstream_calls: list[dict[str, Any]],
        places: list[int],
        kept_out: list[tuple[int, Any]],
    ) -> dict[str, Any]:
        """The merged message in `original`'s key order, new keys after. A key the links took
        out reads as a client would then see it: `tool_calls` none left, `content` emptied
        (null beside calls, as OpenAI's)."""
        fields = dict(self.fields)
        if "tool_calls" in fields:
            placed = list(kept_out)
            added = []
            for call in self.calls.values():
                k = integer(call.get("index"))
                own = upstream_calls[k] if k is not None and 0 <= k < len(upstream_calls) else None
                if own is None or k is None:
                    added.append(_folded_call(call, None))  # a call the links made (text)
                else:
                    placed.append((places[k], _folded_call(call, own)))
            placed.sort(key=lambda item: item[0])
            fields["tool_calls"] = [call for _, call in placed] + added
        message: dict[str, Any] = {}
        for key, value in original.items():
            if key in fields:
                message[key] = fields.pop(key)
            elif key == "tool_calls":  # the links left none: what they were not handed
                message[key] = [call for _, call in kept_out] if isinstance(value, list) else value
            elif key == "content" and isinstance(value, str):
                message[key] = None if fields.get("tool_calls") else ""
            else:
                message[key] = value
        message.update(fields)
        return message


def _folded_call(call: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    """A call as a message carries it: without the trip's index, unless the upstream's own call
    had one; with the upstream call's other keys back, in its order."""
    if own is None:
        return {key: value for key, value in call.items() if key != "index"}
    folded: dict[str, Any] = {}
    for key, value in own.items():
        if key == "function" and isinstance(value, dict) and isinstance(call.get(key), dict):
            folded[key] = {**value, **call[key]}
        elif key != "index" and key in call:
            folded[key] = call[key]
        else:
            folded[key] = value
    for key, value in call.items():
        if key not in folded and key != "index":
            folded[key] = value
    return folded
