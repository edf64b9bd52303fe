"""Reading markup text: the helpers every family's hooks share (literals that may still be
coming, bare and quoted names, JSON), and `Closed`, the base of the families whose span ends
after a closing marker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from proxy.repair.markup.extent import balanced_end
from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall, RefusedSpan
from proxy.wire import json_codec

Named = str | RefusedSpan | None
"""What `name` answers: the name, REFUSED, or None while it may still come."""

MORE = -1
"""`expect`: the text stops inside the literal, which may still come whole."""


def expect(text: str, at: int, literal: str) -> int | None:
    """The index after `literal` when the text has it at `at`; `MORE` while the text ends
    inside it; None when the text differs from it."""
    piece = text[at : at + len(literal)]
    if piece == literal:
        return at + len(literal)
    return MORE if literal.startswith(piece) else None


def expect_any(text: str, at: int, literals: tuple[str, ...]) -> int | None:
    """`expect` for the first of several literals the text can have at `at`."""
    partial = False
    for literal in literals:
        found = expect(text, at, literal)
        if found is not None and found != MORE:
            return found
        partial = partial or found == MORE
    return MORE if partial else None


def sequence(text: str, at: int, parts: tuple[str, ...]) -> int | RefusedSpan | None:
    """The index after the literal `parts`, whitespace allowed around each (JSON's punctuation);
    None while they may still come, REFUSED when the text differs."""
    position = at
    for part in parts:
        position = skip_ws(text, position)
        found = expect(text, position, part)
        if found is None:
            return REFUSED
        if found == MORE:
            return None
        position = found
    return position


def skip_ws(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def is_name_char(char: str) -> bool:
    """Tool names are letters, digits, `_`, `-` and `.` (MCP servers namespace with dots)."""
    return char.isalnum() or char in "_-."


def name_run(text: str, at: int) -> int:
    while at < len(text) and is_name_char(text[at]):
        at += 1
    return at


def valid_name(name: str) -> bool:
    return bool(name) and name_run(name, 0) == len(name)


def bare_name(text: str, at: int, stops: str) -> tuple[str, int] | RefusedSpan | None:
    """A name written bare from `at`, whole once one of `stops` follows it: (name, index of the
    stop); None while the text ends inside it; REFUSED when anything else follows."""
    end = name_run(text, at)
    if end == len(text):
        return None
    if end == at or text[end] not in stops:
        return REFUSED
    return text[at:end], end


def quoted_name(text: str, at: int) -> tuple[str, int] | RefusedSpan | None:
    """A name in double quotes at `at` (JSON's, or an XML attribute's): (name, index after the
    closing quote). Escapes are refused: no tool name needs one."""
    if at >= len(text):
        return None
    if text[at] != '"':
        return REFUSED
    found = bare_name(text, at + 1, '"')
    return (found[0], found[1] + 1) if isinstance(found, tuple) else found


def name_only(found: tuple[str, int] | RefusedSpan | None) -> Named:
    return found[0] if isinstance(found, tuple) else found


def object_name(text: str, at: int, before: Mapping[str, str | None] | None = None) -> Named:
    """The value of the `"name"` key of the JSON object opening at `text[at]`. Key order carries
    no meaning in JSON, and models write `"arguments"` first too (the servers' parsers load the
    object whole): members whose keys `before` lists may come before the name and are skipped,
    their values bracket-balanced or strings (or exactly the JSON literal `before` gives, such as
    Llama's `"type": "function"`). Anything else refuses at its first character."""
    before = before or {}
    keys = tuple(f'"{key}"' for key in ("name", *before))
    position = sequence(text, at, ("{",))
    while isinstance(position, int):
        start = skip_ws(text, position)
        key_end = expect_any(text, start, keys)
        if key_end is None:
            return REFUSED
        if key_end == MORE:
            return None
        after = sequence(text, key_end, (":",))
        if not isinstance(after, int):
            return after
        value = skip_ws(text, after)
        key = text[start + 1 : key_end - 1]
        if key == "name":
            return name_only(quoted_name(text, value))
        literal = before[key]
        if literal is None:
            end = _value_end(text, value)
        else:
            found = expect(text, value, literal)
            end = None if found == MORE else -1 if found is None else found
        if end is None:
            return None
        position = sequence(text, end, (",",)) if end >= 0 else REFUSED
    return position


def _value_end(text: str, at: int) -> int | None:
    """The index after the JSON object, array or string opening at `at`; None while it may
    still close; -1 when no such value opens there."""
    if at >= len(text):
        return None
    if text[at] in "{[":
        return balanced_end(text, at)
    if text[at] != '"':
        return -1
    escaped = False
    for position in range(at + 1, len(text)):
        if escaped:
            escaped = False
        elif text[position] == "\\":
            escaped = True
        elif text[position] == '"':
            return position + 1
    return None


def find_outside_strings(text: str, start: int, marker: str) -> int | None:
    """The index of `marker` from `start`, skipping JSON string literals: a JSON argument may
    quote the marker itself (a model writing about tool calls)."""
    quoted = escaped = False
    for position in range(start, len(text)):
        char = text[position]
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif text.startswith(marker, position):
            return position
    return None


INVALID = object()
"""`json_value`: the text is not JSON (None would be JSON's null)."""


def json_dict(text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds (whitespace around it allowed), or None."""
    value = json_value(text)
    return value if isinstance(value, dict) else None


def json_value(text: str) -> Any:
    """Integers exact however long (json_codec): a call must carry the number the model wrote."""
    try:
        return json_codec.loads(text)
    except (json_codec.JSONDecodeError, RecursionError):
        return INVALID


class Closed(MarkupFamily):
    """A family whose span ends after a closing marker. When the stream ends without it, the
    span ends there if what came parses, but only for a family whose servers read calls without
    it (`closer_optional`); for the others a model that stopped before its closing marker did
    not finish the call, and the span goes out as the text it was, as under `length`."""

    closers: ClassVar[tuple[str, ...]] = ()
    closer_optional: ClassVar[bool] = False
    """The family's serving parsers read a call whose span the model left open (each family
    says where); False: they find calls only between the opener and the closing marker."""

    def end(self, span: str, opener: str, final: bool) -> int | None:
        found = self._closer(span, len(opener))
        if found is not None:
            return found
        if final and self.closer_optional and self._complete(span[len(opener) :]):
            return len(span)
        return None

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        body = span[len(opener) :]
        for closer in self.closers:
            if body.endswith(closer):
                body = body[: -len(closer)]
                break
        return self._parse(body)

    def _closer(self, span: str, start: int) -> int | None:
        """The index just past the first closing marker at or after `start`."""
        ends = [(span.find(c, start), c) for c in self.closers]
        found = [(index, closer) for index, closer in ends if index >= 0]
        if not found:
            return None
        index, closer = min(found)
        return index + len(closer)

    def _parse(self, body: str) -> list[ParsedCall] | None:
        """The calls in the span's text between its opener and closing marker."""
        raise NotImplementedError

    def _complete(self, body: str) -> bool:
        """Whether a body the stream ended in, without the closing marker, is whole calls."""
        return self._parse(body) is not None
