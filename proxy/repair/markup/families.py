"""The tool-call markup each model family writes, read from text the serving layer left as content.

One small class per family (the contract is `spans.MarkupFamily`): `name` reads the first call's
name as soon as it is whole and refuses as soon as the text cannot be the family's markup, `end`
says where the span stops, `calls` parses a complete span, strictly (malformed means None, never a
guess). `FAMILIES` lists them in the order the recogniser asks them.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any, ClassVar

import orjson

from proxy.repair.markup.extent import balanced_end
from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall, _Refused

_Named = str | _Refused | None
"""What `name` answers: the name, REFUSED, or None while it may still come."""

_MORE = -1
"""`_expect`: the text stops inside the literal, which may still come whole."""


def _expect(text: str, at: int, literal: str) -> int | None:
    """The index after `literal` when the text has it at `at`; `_MORE` while the text ends
    inside it; None when the text differs from it."""
    piece = text[at : at + len(literal)]
    if piece == literal:
        return at + len(literal)
    return _MORE if literal.startswith(piece) else None


def _expect_any(text: str, at: int, literals: tuple[str, ...]) -> int | None:
    """`_expect` for the first of several literals the text can have at `at`."""
    partial = False
    for literal in literals:
        found = _expect(text, at, literal)
        if found is not None and found != _MORE:
            return found
        partial = partial or found == _MORE
    return _MORE if partial else None


def _sequence(text: str, at: int, parts: tuple[str, ...]) -> int | _Refused | None:
    """The index after the literal `parts`, whitespace allowed around each (JSON's punctuation);
    None while they may still come, REFUSED when the text differs."""
    position = at
    for part in parts:
        position = _skip_ws(text, position)
        found = _expect(text, position, part)
        if found is None:
            return REFUSED
        if found == _MORE:
            return None
        position = found
    return position


def _skip_ws(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _is_name_char(char: str) -> bool:
    """Tool names are letters, digits, `_`, `-` and `.` (MCP servers namespace with dots)."""
    return char.isalnum() or char in "_-."


def _name_run(text: str, at: int) -> int:
    while at < len(text) and _is_name_char(text[at]):
        at += 1
    return at


def _valid_name(name: str) -> bool:
    return bool(name) and _name_run(name, 0) == len(name)


def _bare_name(text: str, at: int, stops: str) -> tuple[str, int] | _Refused | None:
    """A name written bare from `at`, whole once one of `stops` follows it: (name, index of the
    stop); None while the text ends inside it; REFUSED when anything else follows."""
    end = _name_run(text, at)
    if end == len(text):
        return None
    if end == at or text[end] not in stops:
        return REFUSED
    return text[at:end], end


def _quoted_name(text: str, at: int) -> tuple[str, int] | _Refused | None:
    """A name in double quotes at `at` (JSON's, or an XML attribute's): (name, index after the
    closing quote). Escapes are refused: no tool name needs one."""
    if at >= len(text):
        return None
    if text[at] != '"':
        return REFUSED
    found = _bare_name(text, at + 1, '"')
    return (found[0], found[1] + 1) if isinstance(found, tuple) else found


def _name_only(found: tuple[str, int] | _Refused | None) -> _Named:
    return found[0] if isinstance(found, tuple) else found


def _object_name(text: str, at: int, *leads: tuple[str, ...]) -> _Named:
    """The value of the `"name"` key of the JSON object opening at `text[at]`, when that key
    comes first, or after one of the literal `leads` (Llama's `"type": "function",`)."""
    heads = [(), *leads]
    results = [_sequence(text, at, ("{", *lead, '"name"', ":")) for lead in heads]
    position = next((r for r in results if isinstance(r, int)), None)
    if position is None:
        return None if any(r is None for r in results) else REFUSED
    return _name_only(_quoted_name(text, _skip_ws(text, position)))


def _find_outside_strings(text: str, start: int, marker: str) -> int | None:
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


_INVALID = object()
"""`_json`: the text is not JSON (None would be JSON's null)."""


def _json_dict(text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds (whitespace around it allowed), or None."""
    value = _json(text)
    return value if isinstance(value, dict) else None


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _INVALID


def _after_value(span: str, stop: int, final: bool) -> int | None:
    """The end of a span with no closing marker, its value closing at `stop`: held while only
    whitespace follows (another call of the same span may come), unless the stream ended."""
    if not final and not span[stop:].strip():
        return None
    return stop


def _trim_newline(value: str) -> str:
    """The value without the one newline the chat template writes on each side of it."""
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


class _Closed(MarkupFamily):
    """A family whose span ends after a closing marker. When the stream ends without it (the
    model stopped at its end-of-turn token instead), the span ends there if what came parses."""

    closers: ClassVar[tuple[str, ...]] = ()

    def end(self, span: str, opener: str, final: bool) -> int | None:
        found = self._closer(span, len(opener))
        if found is not None:
            return found
        if final and self._complete(span[len(opener) :]):
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


class Hermes(_Closed):
    """Hermes-style JSON in `<tool_call>` tags: NousResearch Hermes 2 Pro / 3, Qwen 2.5 and Qwen3,
    whose chat templates write `<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`, one
    block per call."""

    family = "hermes"
    openers = ("<tool_call>",)
    closers = ("</tool_call>",)

    def name(self, span: str, opener: str) -> _Named:
        start = _skip_ws(span, len(opener))
        if start == len(span):
            return None
        if span[start] != "{":
            return REFUSED
        return _object_name(span, start)

    def _closer(self, span: str, start: int) -> int | None:
        found = _find_outside_strings(span, start, self.closers[0])
        return None if found is None else found + len(self.closers[0])

    def _parse(self, body: str) -> list[ParsedCall] | None:
        call = _json_dict(body)
        if call is None or set(call) != {"name", "arguments"}:
            return None
        name, arguments = call["name"], call["arguments"]
        if not isinstance(name, str) or not _valid_name(name) or not isinstance(arguments, dict):
            return None
        return [ParsedCall(name, arguments)]


class Qwen3Coder(_Closed):
    """Qwen3-Coder's XML-ish calls (its chat template): `<tool_call>\\n<function=NAME>\\n
    <parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`. Values are bare text.
    The model sometimes drops the opening `<tool_call>` (its servers read a bare `<function=`
    too): such a span runs to `</function>`, and takes the closing `</tool_call>` if it follows."""

    family = "qwen3_coder"
    openers = ("<tool_call>", "<function=")
    closers = ("</tool_call>",)
    _function = "<function="
    _parameter = "<parameter="
    _after_name = ("<parameter=", "</function>")

    def name(self, span: str, opener: str) -> _Named:
        start = 0 if opener == self._function else _skip_ws(span, len(opener))
        found = _expect(span, start, self._function)
        if found is None:
            return REFUSED
        if found == _MORE:
            return None
        named = _bare_name(span, found, ">")
        if not isinstance(named, tuple):
            return named
        # `<function=NAME>` also opens Llama 3.1's custom-tool calls, JSON inside: the first
        # parameter (or the function's end) says Qwen3-Coder.
        following = _expect_any(span, _skip_ws(span, named[1] + 1), self._after_name)
        if following is None:
            return REFUSED
        return None if following == _MORE else named[0]

    def end(self, span: str, opener: str, final: bool) -> int | None:
        if opener != self._function:
            return super().end(span, opener, final)
        close = span.find("</function>")
        if close < 0:
            return None
        stop = close + len("</function>")
        closing = _expect(span, _skip_ws(span, stop), self.closers[0])
        if closing == _MORE:
            return stop if final else None
        return stop if closing is None else closing

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        if opener != self._function:
            return super().calls(span, opener)
        return self._parse(span.rstrip().removesuffix(self.closers[0]))

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = _skip_ws(body, 0)
        while position < len(body):
            if not body.startswith(self._function, position):
                return None
            head_end = body.find(">", position)
            close = body.find("</function>", head_end)
            name = body[position + len(self._function) : head_end]
            if head_end < 0 or close < 0 or not _valid_name(name):
                return None
            arguments = self._parameters(body[head_end + 1 : close])
            if arguments is None:
                return None
            calls.append(ParsedCall(name, arguments, strings=True))
            position = _skip_ws(body, close + len("</function>"))
        return calls or None

    def _parameters(self, inner: str) -> dict[str, str] | None:
        values: dict[str, str] = {}
        position = _skip_ws(inner, 0)
        while position < len(inner):
            if not inner.startswith(self._parameter, position):
                return None
            head_end = inner.find(">", position)
            if head_end < 0:
                return None
            key = inner[position + len(self._parameter) : head_end]
            close = inner.find("</parameter>", head_end)
            following = inner.find(self._parameter, head_end)
            if close >= 0 and (following < 0 or close < following):
                value, position = inner[head_end + 1 : close], close + len("</parameter>")
            else:
                # The model sometimes leaves a parameter unclosed; Qwen3-Coder's servers then
                # read its value up to the next parameter or the function's end.
                stop = following if following >= 0 else len(inner)
                value, position = inner[head_end + 1 : stop], stop
            if not key or key != key.strip() or "<" in key or key in values:
                return None
            values[key] = _trim_newline(value)
            position = _skip_ws(inner, position)
        return values


class Glm(_Closed):
    """GLM-4.5 / 4.6 / 4.7 (their chat templates): `<tool_call>NAME\\n<arg_key>KEY</arg_key>\\n
    <arg_value>VALUE</arg_value>\\n</tool_call>`; 4.7 drops the newlines. Values are bare text
    (non-strings as JSON), and GLM's servers strip the whitespace around keys and values."""

    family = "glm"
    openers = ("<tool_call>",)
    closers = ("</tool_call>",)
    _after_name = ("<arg_key>", "</tool_call>")

    def name(self, span: str, opener: str) -> _Named:
        found = _bare_name(span, _skip_ws(span, len(opener)), "\n<")
        if not isinstance(found, tuple):
            return found
        # The name alone proves little ("<tool_call>Sure\n…" is prose): it counts once the
        # first argument or the closing tag follows it.
        following = _expect_any(span, _skip_ws(span, found[1]), self._after_name)
        if following is None:
            return REFUSED
        return None if following == _MORE else found[0]

    def _parse(self, body: str) -> list[ParsedCall] | None:
        start = _skip_ws(body, 0)
        position = _name_run(body, start)
        name = body[start:position]
        if not name:
            return None
        values: dict[str, str] = {}
        position = _skip_ws(body, position)
        while position < len(body):
            if not body.startswith("<arg_key>", position):
                return None
            key_end = body.find("</arg_key>", position)
            if key_end < 0:
                return None
            key = body[position + len("<arg_key>") : key_end].strip()
            value_start = _skip_ws(body, key_end + len("</arg_key>"))
            if not body.startswith("<arg_value>", value_start):
                return None
            value_end = body.find("</arg_value>", value_start)
            if value_end < 0 or not key or key in values:
                return None
            values[key] = body[value_start + len("<arg_value>") : value_end].strip()
            position = _skip_ws(body, value_end + len("</arg_value>"))
        return [ParsedCall(name, values, strings=True)]

    def _complete(self, body: str) -> bool:
        # Unclosed, a bare name is no evidence of a call ("<tool_call>Sure\n" at the end).
        return body.rstrip().endswith("</arg_value>") and super()._complete(body)


class KimiK2(_Closed):
    """Kimi K2 (Moonshot's chat template and tool-call guide): a section of calls, each
    `<|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{JSON}<|tool_call_end|>`.
    Some checkpoints write the section markers singular (`<|tool_call_section_begin|>`)."""

    family = "kimi_k2"
    openers = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
    closers = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
    _begin = "<|tool_call_begin|>"
    _arguments = "<|tool_call_argument_begin|>"
    _end = "<|tool_call_end|>"
    _id = re.compile(r"(?:functions\.)?([\w.\-]+):\d+")
    """Kimi K2 writes ids as functions.NAME:N (N counts the calls of the conversation)."""

    def name(self, span: str, opener: str) -> _Named:
        found = _expect(span, _skip_ws(span, len(opener)), self._begin)
        if found is None:
            return REFUSED
        if found == _MORE:
            return None
        named = _name_only(_bare_name(span, _skip_ws(span, found), ":"))
        if isinstance(named, str):
            named = named.removeprefix("functions.") or REFUSED
        return named

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = _skip_ws(body, 0)
        while position < len(body):
            if not body.startswith(self._begin, position):
                return None
            marker = body.find(self._arguments, position)
            if marker < 0:
                return None
            call_id = body[position + len(self._begin) : marker].strip()
            matched = self._id.fullmatch(call_id)
            start = marker + len(self._arguments)
            close = body.find(self._end, start)
            # Only the last call may lack its end marker (the stream ended there).
            stop = close if close >= 0 else len(body)
            arguments = _json_dict(body[start:stop])
            if matched is None or arguments is None:
                return None
            calls.append(ParsedCall(matched[1], arguments, id=call_id))
            position = _skip_ws(body, stop + len(self._end) if close >= 0 else stop)
        return calls or None


_FW = "\uff5c"  # FULLWIDTH VERTICAL LINE: DeepSeek's tokenizer spells its markers with it
_SP = "\u2581"  # LOWER ONE EIGHTH BLOCK, its word separator


def _deepseek(words: str) -> str:
    return f"<{_FW}{words.replace(' ', _SP)}{_FW}>"


class DeepSeek(_Closed):
    """DeepSeek V3 / R1 and V3.1 / V3.2-Exp (their chat templates), one class because both share
    the markers and differ only inside a call. Written here with ASCII `|` and `_` for the
    fullwidth bar and the U+2581 separator of the real markers. V3.1:
    `<|tool_call_begin|>NAME<|tool_sep|>{JSON}<|tool_call_end|>`; V3 and R1 write the type
    first and fence the JSON: `<|tool_call_begin|>function<|tool_sep|>NAME\\n```json\\n{JSON}
    \\n```<|tool_call_end|>`. All calls sit in one `<|tool_calls_begin|>…<|tool_calls_end|>`."""

    family = "deepseek"
    openers = (_deepseek("tool calls begin"),)
    closers = (_deepseek("tool calls end"),)
    _begin = _deepseek("tool call begin")
    _sep = _deepseek("tool sep")
    _end = _deepseek("tool call end")
    _fenced = re.compile(r"([\w.\-]+)[ \t]*\n\s*```(?:json)?\s*\n(.*?)\s*```\s*", re.DOTALL)

    def name(self, span: str, opener: str) -> _Named:
        found = _expect(span, _skip_ws(span, len(opener)), self._begin)
        if found is None:
            return REFUSED
        if found == _MORE:
            return None
        word = _bare_name(span, _skip_ws(span, found), "<")
        if not isinstance(word, tuple):
            return word
        after = _expect(span, word[1], self._sep)
        if after is None:
            return REFUSED
        if after == _MORE:
            return None
        if word[0] != "function":
            return word[0]
        # V3 writes the type `function` here, V3.1 the name (a tool may be called `function`):
        # the JSON right after the separator says V3.1.
        following = _skip_ws(span, after)
        if following == len(span):
            return None
        if span[following] == "{":
            return word[0]
        return _name_only(_bare_name(span, after, " \t\n"))

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = _skip_ws(body, 0)
        while position < len(body):
            if not body.startswith(self._begin, position):
                return None
            sep = body.find(self._sep, position)
            if sep < 0:
                return None
            word = body[position + len(self._begin) : sep]
            start = sep + len(self._sep)
            close = body.find(self._end, start)
            stop = close if close >= 0 else len(body)
            call = self._call(word, body[start:stop])
            if call is None:
                return None
            calls.append(call)
            position = _skip_ws(body, stop + len(self._end) if close >= 0 else stop)
        return calls or None

    def _call(self, word: str, rest: str) -> ParsedCall | None:
        if word == "function" and not rest.lstrip().startswith("{"):
            fenced = self._fenced.fullmatch(rest)
            if fenced is None:
                return None
            word, rest = fenced[1], fenced[2]
        arguments = _json_dict(rest)
        if not _valid_name(word) or arguments is None:
            return None
        return ParsedCall(word, arguments)


class Mistral(MarkupFamily):
    """Mistral's `[TOOL_CALLS]` (mistral-common's chat templates). Before tokenizer v11 a JSON
    list, `[TOOL_CALLS][{"name": …, "arguments": {…}, "id": …}]` (Mistral 7B v0.3, Nemo); from
    v11 one call per marker, `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{JSON}` where the version carries
    call ids and `[TOOL_CALLS]NAME[ARGS]{JSON}` where it does not (Mistral Small 3.x, Magistral,
    Devstral); and the bare `NAME{JSON}` when the server decoded `[ARGS]` away as a control token.
    No closing marker: the span ends where the JSON closes."""

    family = "mistral"
    openers = ("[TOOL_CALLS]",)

    def call_id(self, digest: str) -> str:
        # Mistral's servers reject any other id on the follow-up: exactly 9 alphanumerics.
        return digest[:9]

    _markers = ("[ARGS]", "[CALL_ID]")

    def name(self, span: str, opener: str) -> _Named:
        start = _skip_ws(span, len(opener))
        if start == len(span):
            return None
        if span[start] == "[":
            first = _skip_ws(span, start + 1)
            if first == len(span):
                return None
            return _object_name(span, first) if span[first] == "{" else REFUSED
        found = _bare_name(span, start, "[{")
        if not isinstance(found, tuple) or span[found[1]] == "{":
            return _name_only(found)
        marker = _expect_any(span, found[1], self._markers)
        if marker is None:
            return REFUSED
        return None if marker == _MORE else found[0]

    def end(self, span: str, opener: str, final: bool) -> int | None:
        start = self._value_start(span, len(opener))
        if start is None:
            return None
        stop = balanced_end(span, start)
        return None if stop is None else _after_value(span, stop, final)

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        start = _skip_ws(span, len(opener))
        if span[start : start + 1] == "[":
            return self._listed(_json(span[start:]))
        name_end = _name_run(span, start)
        position, call_id = name_end, None
        if span.startswith("[CALL_ID]", position):
            id_start = position + len("[CALL_ID]")
            position = _name_run(span, id_start)
            call_id = span[id_start:position]
        if span.startswith("[ARGS]", position):
            position += len("[ARGS]")
        arguments = _json_dict(span[position:])
        name = span[start:name_end]
        if arguments is None or not name or call_id == "":
            return None
        return [ParsedCall(name, arguments, id=call_id)]

    def _value_start(self, span: str, at: int) -> int | None:
        """Where the span's JSON opens: the list, or the arguments after the v11 header."""
        start = _skip_ws(span, at)
        if span[start : start + 1] == "[":
            return start
        position = _name_run(span, start)
        if span.startswith("[CALL_ID]", position):
            position = _name_run(span, position + len("[CALL_ID]"))
        if span.startswith("[ARGS]", position):
            position += len("[ARGS]")
        return position if position < len(span) else None

    @staticmethod
    def _listed(value: Any) -> list[ParsedCall] | None:
        if not isinstance(value, list) or not value:
            return None
        calls = []
        for item in value:
            if not isinstance(item, dict) or not {"name", "arguments"} <= set(item):
                return None
            name, arguments, call_id = item["name"], item["arguments"], item.get("id")
            if set(item) - {"name", "arguments", "id"} or not isinstance(arguments, dict):
                return None
            if not isinstance(name, str) or not _valid_name(name):
                return None
            if call_id is not None and not isinstance(call_id, str):
                return None
            calls.append(ParsedCall(name, arguments, id=call_id))
        return calls


class LlamaJson(MarkupFamily):
    """Llama 3.1 / 3.2 / 3.3 and Llama 4 JSON calls (Meta's prompt format and chat templates):
    `{"name": NAME, "parameters": {…}}` as the whole reply, optionally after `<|python_tag|>`,
    several separated by `;`. Models also write "arguments", and a leading `"type": "function"`."""

    family = "llama_json"
    openers = ("<|python_tag|>", "{")
    at_start_only = True
    _lead = ('"type"', ":", '"function"', ",")

    def name(self, span: str, opener: str) -> _Named:
        start = self._start(span, opener)
        if start == len(span):
            return None
        if span[start] != "{":
            return REFUSED
        return _object_name(span, start, self._lead)

    def end(self, span: str, opener: str, final: bool) -> int | None:
        stop = balanced_end(span, self._start(span, opener))
        if stop is None:
            return None
        while True:
            following = _skip_ws(span, stop)
            if following == len(span) or span[following] != ";":
                return _after_value(span, stop, final)
            start = _skip_ws(span, following + 1)
            if start == len(span):
                return stop if final else None
            if span[start] != "{":
                return stop
            next_stop = balanced_end(span, start)
            if next_stop is None:
                return stop if final else None
            stop = next_stop

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        calls = []
        start = self._start(span, opener)
        while True:
            stop = balanced_end(span, start)
            call = None if stop is None else self._call(_json_dict(span[start:stop]))
            if call is None:
                return None
            calls.append(call)
            following = _skip_ws(span, stop)
            if following == len(span):
                return calls
            if span[following] != ";":
                return None
            start = _skip_ws(span, following + 1)

    @staticmethod
    def _start(span: str, opener: str) -> int:
        return 0 if opener == "{" else _skip_ws(span, len(opener))

    @staticmethod
    def _call(value: dict[str, Any] | None) -> ParsedCall | None:
        if value is None or set(value) - {"type", "name", "parameters", "arguments"}:
            return None
        if value.get("type", "function") != "function":
            return None
        argument_keys = [key for key in ("parameters", "arguments") if key in value]
        name = value.get("name")
        if len(argument_keys) != 1 or not isinstance(name, str) or not _valid_name(name):
            return None
        arguments = value[argument_keys[0]]
        return ParsedCall(name, arguments) if isinstance(arguments, dict) else None


class LlamaFunction(MarkupFamily):
    """Llama 3.1's custom-tool calls (Meta's Llama 3.1 prompt format):
    `<function=NAME>{JSON}</function>`, one call per element."""

    family = "llama_function"
    openers = ("<function=",)
    _close = "</function>"

    def name(self, span: str, opener: str) -> _Named:
        found = _bare_name(span, len(opener), ">")
        if not isinstance(found, tuple):
            return found
        body = _skip_ws(span, found[1] + 1)
        if body == len(span):
            return None
        return found[0] if span[body] == "{" else REFUSED

    def end(self, span: str, opener: str, final: bool) -> int | None:
        head = span.find(">", len(opener))
        close = None if head < 0 else _find_outside_strings(span, head, self._close)
        if close is not None:
            return close + len(self._close)
        if final and head >= 0 and self.calls(span, opener) is not None:
            return len(span)
        return None

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        head = span.find(">", len(opener))
        name = span[len(opener) : head]
        if head < 0 or not _valid_name(name):
            return None
        arguments = _json_dict(span[head + 1 :].removesuffix(self._close))
        return None if arguments is None else [ParsedCall(name, arguments)]


class _NotLiteral(Exception):
    """An argument value that is not a plain literal (a name, a call, an operation …)."""


def _literal(node: ast.expr) -> Any:
    """The value of a literal argument: strings, finite numbers, True/False/None, lists and
    dicts with string keys, what JSON can carry; anything else is not a value the model gave."""
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, str | bool | int):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            value = _literal(operand)
            return -value if isinstance(node.op, ast.USub) else value
    elif isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    elif isinstance(node, ast.Dict):
        result = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise _NotLiteral
            result[key.value] = _literal(value)
        return result
    raise _NotLiteral


class Pythonic(MarkupFamily):
    """Python-call lists: Llama 3.2 / 4 and ToolACE (their chat templates' "pythonic" format),
    `[get_weather(city="Paris"), get_time(tz='UTC')]` as the whole reply; Llama 4 may wrap it in
    `<|python_start|>…<|python_end|>`. Names are Python identifiers, arguments keyword literals."""

    family = "pythonic"
    openers = ("[", "<|python_start|>")
    at_start_only = True
    _wrap_end = "<|python_end|>"
    _quotes = "\"'"

    def name(self, span: str, opener: str) -> _Named:
        start = self._start(span, opener)
        if start is None or start == _MORE:
            return None if start == _MORE else REFUSED
        first = _skip_ws(span, start + 1)
        if first == len(span):
            return None
        if not (span[first].isalpha() or span[first] == "_"):
            return REFUSED
        end = first
        while end < len(span) and (span[end].isalnum() or span[end] == "_"):
            end += 1
        if end == len(span):
            return None
        return span[first:end] if span[end] == "(" else REFUSED

    def end(self, span: str, opener: str, final: bool) -> int | None:
        start = self._start(span, opener)
        if start is None or start == _MORE:
            return None
        stop = balanced_end(span, start, self._quotes)
        if stop is None:
            return None
        if opener == "[":
            return _after_value(span, stop, final)
        wrapped = _expect(span, _skip_ws(span, stop), self._wrap_end)
        if wrapped == _MORE:
            return stop if final else None
        return stop if wrapped is None else wrapped

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        start = self._start(span, opener)
        if start is None or start == _MORE:
            return None
        stop = balanced_end(span, start, self._quotes)
        if stop is None or span[stop:].strip() not in ("", self._wrap_end):
            return None
        try:
            tree = ast.parse(span[start:stop], mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not isinstance(tree.body, ast.List) or not tree.body.elts:
            return None
        calls = []
        for node in tree.body.elts:
            call = self._call(node)
            if call is None:
                return None
            calls.append(call)
        return calls

    @staticmethod
    def _call(node: ast.expr) -> ParsedCall | None:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            return None
        arguments = {}
        for keyword in node.keywords:
            if keyword.arg is None:  # **kwargs
                return None
            try:
                arguments[keyword.arg] = _literal(keyword.value)
            except _NotLiteral:
                return None
        return ParsedCall(node.func.id, arguments)

    def _start(self, span: str, opener: str) -> int | None:
        """Where the list opens: at once, or after `<|python_start|>` (`_MORE` while unknown)."""
        if opener == "[":
            return 0
        start = _skip_ws(span, len(opener))
        if start == len(span):
            return _MORE
        return start if span[start] == "[" else None


class Harmony(MarkupFamily):
    """gpt-oss's harmony format leaking as text (OpenAI's harmony guide): a message to
    `functions.NAME`, its recipient after the channel
    (`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{JSON}<|call|>`) or
    before it (`<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>…`).
    A message with no `to=functions.` recipient (analysis, final, preambles) is not a call."""

    family = "harmony"
    openers = ("<|start|>", "<|channel|>")
    _close = "<|call|>"
    _header = re.compile(
        r"(?:<\|start\|>assistant(?:\s+to=functions\.(?P<before>[\w.\-]+))?)?"
        r"(?:<\|channel\|>[a-z]+(?:\s+to=functions\.(?P<after>[\w.\-]+))?)?"
        r"\s*(?:<\|constrain\|>)?\s*(?P<type>[\w\-/]*)\s*<\|message\|>"
    )

    def name(self, span: str, opener: str) -> _Named:
        position = len(opener)
        if opener == "<|start|>":
            position = _expect(span, position, "assistant")
            if position is None:
                return REFUSED
            if position == _MORE or position == len(span):
                return None
            if span[position] != "<":
                return self._recipient(span, position)
            position = _expect(span, position, "<|channel|>")
            if position is None:
                return REFUSED
            if position == _MORE:
                return None
        channel_end = position
        while channel_end < len(span) and span[channel_end].isalpha():
            channel_end += 1
        if channel_end == len(span):
            return None
        return self._recipient(span, channel_end) if channel_end > position else REFUSED

    @staticmethod
    def _recipient(span: str, at: int) -> _Named:
        """` to=functions.NAME` at `at`, whole once the space or `<` after the name shows."""
        if at == len(span):
            return None
        if not span[at].isspace():
            return REFUSED
        found = _expect(span, _skip_ws(span, at), "to=functions.")
        if found is None:
            return REFUSED
        if found == _MORE:
            return None
        return _name_only(_bare_name(span, found, " \t\n<"))

    def end(self, span: str, opener: str, final: bool) -> int | None:
        # `<|call|>` counts only after `<|message|>`: the header is short and never holds it.
        message = span.find("<|message|>", len(opener))
        close = -1 if message < 0 else span.find(self._close, message)
        if close >= 0:
            return close + len(self._close)
        if final and message >= 0 and self.calls(span, opener) is not None:
            return len(span)
        return None

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        header = self._header.match(span)
        if header is None or span.startswith("<|start|>") != (opener == "<|start|>"):
            return None
        names = [n for n in (header["before"], header["after"]) if n]
        if len(names) != 1 or header["type"].lower() not in ("", "json"):
            return None
        arguments = _json_dict(span[header.end() :].removesuffix(self._close))
        return None if arguments is None else [ParsedCall(names[0], arguments)]


class _Invokes(_Closed):
    """Invoke blocks: `<invoke name="NAME">` holding `<parameter name="KEY" …>VALUE</parameter>`
    elements, several invokes in one block (MiniMax-M2, DeepSeek's DSML)."""

    _invoke: ClassVar[str] = "<invoke name="
    _invoke_end: ClassVar[str] = "</invoke>"
    _parameter: ClassVar[str] = "<parameter name="
    _parameter_end: ClassVar[str] = "</parameter>"
    strings: ClassVar[bool] = True

    def name(self, span: str, opener: str) -> _Named:
        found = _expect(span, _skip_ws(span, len(opener)), self._invoke)
        if found is None:
            return REFUSED
        if found == _MORE or found == len(span):
            return None
        if span[found] == '"':
            return _name_only(_quoted_name(span, found))
        return _name_only(_bare_name(span, found, ">"))

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = _skip_ws(body, 0)
        while position < len(body):
            head = self._tag(body, position, self._invoke)
            if head is None:
                return None
            attributes, after = head
            close = body.find(self._invoke_end, after)
            name = _unquote(attributes)
            arguments = None if close < 0 else self._parameters(body[after:close])
            if arguments is None or not _valid_name(name):
                return None
            calls.append(ParsedCall(name, arguments, strings=self.strings))
            position = _skip_ws(body, close + len(self._invoke_end))
        return calls or None

    def _parameters(self, inner: str) -> dict[str, Any] | None:
        values: dict[str, Any] = {}
        position = _skip_ws(inner, 0)
        while position < len(inner):
            head = self._tag(inner, position, self._parameter)
            if head is None:
                return None
            attributes, after = head
            close = inner.find(self._parameter_end, after)
            argument = None if close < 0 else self._argument(attributes, inner[after:close])
            if argument is None or not argument[0] or argument[0] in values:
                return None
            values[argument[0]] = argument[1]
            position = _skip_ws(inner, close + len(self._parameter_end))
        return values

    def _argument(self, attributes: str, value: str) -> tuple[str, Any] | None:
        """The parameter's (key, value) from its tag's attributes and its text."""
        raise NotImplementedError

    @staticmethod
    def _tag(text: str, at: int, prefix: str) -> tuple[str, int] | None:
        """The opening tag starting with `prefix` at `at`: (its attributes' text after the
        prefix, the index after its `>`)."""
        if not text.startswith(prefix, at):
            return None
        tag_end = text.find(">", at)
        return None if tag_end < 0 else (text[at + len(prefix) : tag_end], tag_end + 1)


def _unquote(attribute: str) -> str:
    """An attribute value, in double or single quotes or (as models sometimes write) bare."""
    value = attribute.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


class MiniMaxM2(_Invokes):
    """MiniMax-M2 (its chat template): `<minimax:tool_call>\\n<invoke name="NAME">\\n
    <parameter name="KEY">VALUE</parameter>\\n</invoke>\\n</minimax:tool_call>`, several invokes
    in one block. Values are bare text; MiniMax's servers strip the whitespace around them."""

    family = "minimax_m2"
    openers = ("<minimax:tool_call>",)
    closers = ("</minimax:tool_call>",)

    def _argument(self, attributes: str, value: str) -> tuple[str, Any] | None:
        return _unquote(attributes), value.strip()


_DSML = f"{_FW}DSML{_FW}"


class DeepSeekDsml(_Invokes):
    """DeepSeek V3.2's DSML (its encoding script, `encoding_dsv32.py`): `<|DSML|function_calls>`
    holding `<|DSML|invoke name="NAME">` blocks of `<|DSML|parameter name="KEY" string="true">
    VALUE</|DSML|parameter>` (the bars fullwidth, as in every DeepSeek marker); later DeepSeek
    encodings name the block `tool_calls`. The model types each value itself: `string="true"` is
    the text as written, `string="false"` a JSON value."""

    family = "deepseek_dsml"
    openers = (f"<{_DSML}function_calls>", f"<{_DSML}tool_calls>")
    closers = (f"</{_DSML}function_calls>", f"</{_DSML}tool_calls>")
    _invoke = f"<{_DSML}invoke name="
    _invoke_end = f"</{_DSML}invoke>"
    _parameter = f"<{_DSML}parameter name="
    _parameter_end = f"</{_DSML}parameter>"
    strings = False
    _attributes = re.compile(r'\s*"([^"]+)"\s+string="(true|false)"\s*')

    def _argument(self, attributes: str, value: str) -> tuple[str, Any] | None:
        typed = self._attributes.fullmatch(attributes)
        if typed is None:
            return None
        if typed[2] == "true":
            return typed[1], value
        decoded = _json(value)
        return None if decoded is _INVALID else (typed[1], decoded)


FAMILIES: tuple[MarkupFamily, ...] = (
    Hermes(),
    Qwen3Coder(),
    Glm(),
    KimiK2(),
    DeepSeek(),
    DeepSeekDsml(),
    Mistral(),
    LlamaJson(),
    LlamaFunction(),
    Pythonic(),
    Harmony(),
    MiniMaxM2(),
)
"""Every family, in the order the recogniser asks them (the first to name a call wins)."""
