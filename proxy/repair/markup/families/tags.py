"""Families whose calls sit in named tags that close: Hermes' JSON in `<tool_call>`, Qwen3-Coder's
`<function=…>` and GLM's `<arg_key>` elements (all three behind the same `<tool_call>`), and
Llama 3.1's `<function=NAME>{JSON}</function>`. Openers are shared (`<tool_call>`, `<function=`),
so each `name` refuses the others' markup as soon as it shows."""

from __future__ import annotations

from proxy.repair.markup.families.reading import (
    MORE,
    Closed,
    Named,
    bare_name,
    expect,
    expect_any,
    find_outside_strings,
    json_dict,
    name_run,
    object_name,
    skip_ws,
    valid_name,
)
from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall


class Hermes(Closed):
    """Hermes-style JSON in `<tool_call>` tags: NousResearch Hermes 2 Pro / 3, Qwen 2.5 and Qwen3,
    whose chat templates write `<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`, one
    block per call. A last block the model left open is a call (vLLM's hermes_tool_parser.py,
    `<tool_call>(.*?)</tool_call>|<tool_call>(.*)`: "happens sometimes")."""

    family = "hermes"
    openers = ("<tool_call>",)
    closers = ("</tool_call>",)
    closer_optional = True

    def name(self, span: str, opener: str) -> Named:
        start = skip_ws(span, len(opener))
        if start == len(span):
            return None
        if span[start] != "{":
            return REFUSED
        return object_name(span, start, {"arguments": None})

    def _closer(self, span: str, start: int) -> int | None:
        found = find_outside_strings(span, start, self.closers[0])
        return None if found is None else found + len(self.closers[0])

    def _parse(self, body: str) -> list[ParsedCall] | None:
        call = json_dict(body)
        if call is None or set(call) != {"name", "arguments"}:
            return None
        name, arguments = call["name"], call["arguments"]
        if not isinstance(name, str) or not valid_name(name) or not isinstance(arguments, dict):
            return None
        return [ParsedCall(name, arguments)]


def _trim_newline(value: str) -> str:
    """The value without the one newline the chat template writes on each side of it."""
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


class Qwen3Coder(Closed):
    """Qwen3-Coder's XML-ish calls (its chat template): `<tool_call>\\n<function=NAME>\\n
    <parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`. Values are bare text.
    The model sometimes drops the opening `<tool_call>` (its servers read a bare `<function=`
    too): such a span runs to `</function>`, and takes the closing `</tool_call>` if it follows.
    A `</tool_call>` the model never wrote is optional (vLLM's qwen3coder_tool_parser.py,
    `<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$`); `</function>` is not, here, though that
    regex reads an open function too: its last parameter may be cut anywhere."""

    family = "qwen3_coder"
    openers = ("<tool_call>", "<function=")
    closers = ("</tool_call>",)
    closer_optional = True
    _function = "<function="
    _parameter = "<parameter="
    _after_name = ("<parameter=", "</function>")

    def name(self, span: str, opener: str) -> Named:
        start = 0 if opener == self._function else skip_ws(span, len(opener))
        found = expect(span, start, self._function)
        if found is None:
            return REFUSED
        if found == MORE:
            return None
        named = bare_name(span, found, ">")
        if not isinstance(named, tuple):
            return named
        # `<function=NAME>` also opens Llama 3.1's custom-tool calls, JSON inside: the first
        # parameter (or the function's end) says Qwen3-Coder.
        following = expect_any(span, skip_ws(span, named[1] + 1), self._after_name)
        if following is None:
            return REFUSED
        return None if following == MORE else named[0]

    def end(self, span: str, opener: str, final: bool) -> int | None:
        if opener != self._function:
            return super().end(span, opener, final)
        close = span.find("</function>")
        if close < 0:
            return None
        stop = close + len("</function>")
        closing = expect(span, skip_ws(span, stop), self.closers[0])
        if closing == MORE:
            return stop if final else None
        return stop if closing is None else closing

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        if opener != self._function:
            return super().calls(span, opener)
        return self._parse(span.rstrip().removesuffix(self.closers[0]))

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = skip_ws(body, 0)
        while position < len(body):
            if not body.startswith(self._function, position):
                return None
            head_end = body.find(">", position)
            close = body.find("</function>", head_end)
            name = body[position + len(self._function) : head_end]
            if head_end < 0 or close < 0 or not valid_name(name):
                return None
            arguments = self._parameters(body[head_end + 1 : close])
            if arguments is None:
                return None
            calls.append(ParsedCall(name, arguments, strings=True))
            position = skip_ws(body, close + len("</function>"))
        return calls or None

    def _parameters(self, inner: str) -> dict[str, str] | None:
        values: dict[str, str] = {}
        position = skip_ws(inner, 0)
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
            position = skip_ws(inner, position)
        return values


def _gap(text: str, at: int) -> int:
    """The index after the whitespace and literal `\\n`s at `at`: GLM's separators. Some
    quantised GLM models write the template's newline as a backslash and an `n`, and vLLM's and
    SGLang's GLM parsers take it (`(?:\\\\n|\\n)` after the name, `(?:\\\\n|\\s)*` between a
    key and its value); MORE when the text ends on the backslash."""
    while True:
        at = skip_ws(text, at)
        if not text.startswith("\\", at):
            return at
        if at + 1 == len(text):
            return MORE
        if text[at + 1] != "n":
            return at
        at += 2


class Glm(Closed):
    """GLM-4.5 / 4.6 / 4.7 (their chat templates): `<tool_call>NAME\\n<arg_key>KEY</arg_key>\\n
    <arg_value>VALUE</arg_value>\\n</tool_call>`; 4.7 drops the newlines. Values are bare text
    (non-strings as JSON), taken as written between the tags: the template adds nothing inside
    `<arg_value>`, and indentation is data. vLLM's glm4_moe_tool_parser.py strips the value,
    SGLang's glm4_moe_detector.py keeps it (`parse_arguments` on the raw text): the reading
    that loses nothing is SGLang's (a typed value is read after trimming, `DeclaredTools.typed`).
    `</tool_call>` is required: both find calls with `<tool_call>.*?</tool_call>` only, so a
    span the model left open at a normal finish stays text. A literal `\\n` for the template's
    newlines is read as they read it (`_gap`)."""

    family = "glm"
    openers = ("<tool_call>",)
    closers = ("</tool_call>",)
    _after_name = ("<arg_key>", "</tool_call>")

    def name(self, span: str, opener: str) -> Named:
        found = bare_name(span, skip_ws(span, len(opener)), "\n<\\")
        if not isinstance(found, tuple):
            return found
        # The name alone proves little ("<tool_call>Sure\n…" is prose): it counts once the
        # first argument or the closing tag follows it.
        gap = _gap(span, found[1])
        following = None if gap == MORE else expect_any(span, gap, self._after_name)
        if gap != MORE and following is None:
            return REFUSED
        return None if following is None or following == MORE else found[0]

    def _parse(self, body: str) -> list[ParsedCall] | None:
        start = skip_ws(body, 0)
        position = name_run(body, start)
        name = body[start:position]
        if not name:
            return None
        values: dict[str, str] = {}
        position = _gap(body, position)
        while position < len(body):
            if not body.startswith("<arg_key>", position):
                return None
            key_end = body.find("</arg_key>", position)
            if key_end < 0:
                return None
            key = body[position + len("<arg_key>") : key_end].strip()
            value_start = _gap(body, key_end + len("</arg_key>"))
            if not body.startswith("<arg_value>", value_start):
                return None
            value_end = body.find("</arg_value>", value_start)
            if value_end < 0 or not key or key in values:
                return None
            values[key] = body[value_start + len("<arg_value>") : value_end]
            position = _gap(body, value_end + len("</arg_value>"))
        return [ParsedCall(name, values, strings=True)]


class LlamaFunction(MarkupFamily):
    """Llama 3.1's custom-tool calls (Meta's Llama 3.1 prompt format):
    `<function=NAME>{JSON}</function>`, one call per element."""

    family = "llama_function"
    openers = ("<function=",)
    _close = "</function>"

    def name(self, span: str, opener: str) -> Named:
        found = bare_name(span, len(opener), ">")
        if not isinstance(found, tuple):
            return found
        body = skip_ws(span, found[1] + 1)
        if body == len(span):
            return None
        return found[0] if span[body] == "{" else REFUSED

    def end(self, span: str, opener: str, final: bool) -> int | None:
        head = span.find(">", len(opener))
        close = None if head < 0 else find_outside_strings(span, head, self._close)
        if close is not None:
            return close + len(self._close)
        if final and head >= 0 and self.calls(span, opener) is not None:
            return len(span)
        return None

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        head = span.find(">", len(opener))
        name = span[len(opener) : head]
        if head < 0 or not valid_name(name):
            return None
        arguments = json_dict(span[head + 1 :].removesuffix(self._close))
        return None if arguments is None else [ParsedCall(name, arguments)]
