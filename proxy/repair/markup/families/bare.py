"""Families whose markup has no closing marker: Mistral's `[TOOL_CALLS]`, Llama's bare JSON and
the pythonic list. The span ends where its brackets balance (`extent.balanced_end`), and is held
while only whitespace follows, since another call of the same span may still come."""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from proxy.repair.markup.extent import balanced_end
from proxy.repair.markup.families.reading import (
    MORE,
    Named,
    bare_name,
    expect,
    expect_any,
    json_dict,
    json_value,
    name_only,
    name_run,
    object_name,
    skip_ws,
    valid_name,
)
from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall


def _after_value(span: str, stop: int, final: bool) -> int | None:
    """The end of a span with no closing marker, its value closing at `stop`: held while only
    whitespace follows (another call of the same span may come), unless the stream ended."""
    if not final and not span[stop:].strip():
        return None
    return stop


class Mistral(MarkupFamily):
    """Mistral's `[TOOL_CALLS]` (mistral-common's chat templates). Before tokenizer v11 a JSON
    list, `[TOOL_CALLS][{"name": …, "arguments": {…}, "id": …}]` (Mistral 7B v0.3, Nemo); from
    v11 one call per marker, `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{JSON}` where the version carries
    call ids and `[TOOL_CALLS]NAME[ARGS]{JSON}` where it does not (Mistral Small 3.x, Magistral,
    Devstral); and the bare `NAME{JSON}` when the server decoded `[ARGS]` away as a control token.
    No closing marker: the span ends where the JSON closes. In the list, key order carries no
    meaning (vLLM's mistral_tool_parser.py loads it whole): `{"arguments": {…}, "name": …}` is a
    call too, once its name shows within the recogniser's `NAME_WITHIN` characters."""

    family = "mistral"
    openers = ("[TOOL_CALLS]",)

    def call_id(self, digest: str) -> str:
        # Mistral's servers reject any other id on the follow-up: exactly 9 alphanumerics.
        return digest[:9]

    _markers = ("[ARGS]", "[CALL_ID]")
    _before_name: ClassVar[Mapping[str, str | None]] = {"arguments": None, "id": None}

    def name(self, span: str, opener: str) -> Named:
        start = skip_ws(span, len(opener))
        if start == len(span):
            return None
        if span[start] == "[":
            first = skip_ws(span, start + 1)
            if first == len(span):
                return None
            return object_name(span, first, self._before_name) if span[first] == "{" else REFUSED
        found = bare_name(span, start, "[{")
        if not isinstance(found, tuple) or span[found[1]] == "{":
            return name_only(found)
        marker = expect_any(span, found[1], self._markers)
        if marker is None:
            return REFUSED
        return None if marker == MORE else found[0]

    def end(self, span: str, opener: str, final: bool) -> int | None:
        start = self._value_start(span, len(opener))
        if start is None:
            return None
        stop = balanced_end(span, start)
        return None if stop is None else _after_value(span, stop, final)

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        start = skip_ws(span, len(opener))
        if span[start : start + 1] == "[":
            return self._listed(json_value(span[start:]))
        name_end = name_run(span, start)
        position, call_id = name_end, None
        if span.startswith("[CALL_ID]", position):
            id_start = position + len("[CALL_ID]")
            position = name_run(span, id_start)
            call_id = span[id_start:position]
        if span.startswith("[ARGS]", position):
            position += len("[ARGS]")
        arguments = json_dict(span[position:])
        name = span[start:name_end]
        if arguments is None or not name or call_id == "":
            return None
        return [ParsedCall(name, arguments, id=call_id)]

    def _value_start(self, span: str, at: int) -> int | None:
        """Where the span's JSON opens: the list, or the arguments after the v11 header."""
        start = skip_ws(span, at)
        if span[start : start + 1] == "[":
            return start
        position = name_run(span, start)
        if span.startswith("[CALL_ID]", position):
            position = name_run(span, position + len("[CALL_ID]"))
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
            if not isinstance(name, str) or not valid_name(name):
                return None
            if call_id is not None and not isinstance(call_id, str):
                return None
            calls.append(ParsedCall(name, arguments, id=call_id))
        return calls


class LlamaJson(MarkupFamily):
    """Llama 3.1 / 3.2 / 3.3 and Llama 4 JSON calls (Meta's prompt format and chat templates):
    `{"name": NAME, "parameters": {…}}` as the whole reply, optionally after `<|python_tag|>`,
    several separated by `;`. Models also write "arguments", and a leading `"type": "function"`.
    Several calls each after its own `<|python_tag|>` are read too: SGLang's llama32_detector.py
    decodes one object after another and skips to the next `{"name":`; vLLM's llama_tool_parser.py
    keeps only the first of them, the rest lost, so SGLang's reading is the one taken."""

    family = "llama_json"
    openers = ("<|python_tag|>", "{")
    at_start_only = True
    _before_name: ClassVar[Mapping[str, str | None]] = {
        "type": '"function"',
        "parameters": None,
        "arguments": None,
    }

    def name(self, span: str, opener: str) -> Named:
        start = self._start(span, opener)
        if start == len(span):
            return None
        if span[start] != "{":
            return REFUSED
        return object_name(span, start, self._before_name)

    def end(self, span: str, opener: str, final: bool) -> int | None:
        stop = balanced_end(span, self._start(span, opener))
        if stop is None:
            return None
        while True:
            following = self._separator(span, stop)
            if following is None:
                return _after_value(span, stop, final)
            if following == MORE:
                return stop if final else None
            start = skip_ws(span, following)
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
            if stop is None:
                return None
            call = self._call(json_dict(span[start:stop]))
            if call is None:
                return None
            calls.append(call)
            if skip_ws(span, stop) == len(span):
                return calls
            following = self._separator(span, stop)
            if following is None or following == MORE:
                return None
            start = skip_ws(span, following)

    def _separator(self, span: str, at: int) -> int | None:
        """The index after the separator between two calls at `at` (whitespace around it): `;`,
        or `<|python_tag|>` again; `MORE` while the text ends inside the tag."""
        position = skip_ws(span, at)
        if span.startswith(";", position):
            return position + 1
        return expect(span, position, self.openers[0]) if position < len(span) else None

    @staticmethod
    def _start(span: str, opener: str) -> int:
        return 0 if opener == "{" else skip_ws(span, len(opener))

    @staticmethod
    def _call(value: dict[str, Any] | None) -> ParsedCall | None:
        if value is None or set(value) - {"type", "name", "parameters", "arguments"}:
            return None
        if value.get("type", "function") != "function":
            return None
        argument_keys = [key for key in ("parameters", "arguments") if key in value]
        name = value.get("name")
        if len(argument_keys) != 1 or not isinstance(name, str) or not valid_name(name):
            return None
        arguments = value[argument_keys[0]]
        return ParsedCall(name, arguments) if isinstance(arguments, dict) else None


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
        for key, item in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise _NotLiteral
            result[key.value] = _literal(item)
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

    def name(self, span: str, opener: str) -> Named:
        start = self._start(span, opener)
        if start is None or start == MORE:
            return None if start == MORE else REFUSED
        first = skip_ws(span, start + 1)
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
        if start is None or start == MORE:
            return None
        stop = balanced_end(span, start, self._quotes)
        if stop is None:
            return None
        if opener == "[":
            return _after_value(span, stop, final)
        wrapped = expect(span, skip_ws(span, stop), self._wrap_end)
        if wrapped == MORE:
            return stop if final else None
        return stop if wrapped is None else wrapped

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        start = self._start(span, opener)
        if start is None or start == MORE:
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
        """Where the list opens: at once, or after `<|python_start|>` (`MORE` while unknown)."""
        if opener == "[":
            return 0
        start = skip_ws(span, len(opener))
        if start == len(span):
            return MORE
        return start if span[start] == "[" else None
