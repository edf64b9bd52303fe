"""Families whose markup is `<invoke name="NAME">` blocks of `<parameter name="KEY">` elements,
several invokes in one block: MiniMax-M2 and DeepSeek V3.2's DSML. They share `_Invokes`, and
differ in their block's tags and in how a parameter says its value's type."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from proxy.repair.markup.families.reading import (
    INVALID,
    MORE,
    Closed,
    Named,
    bare_name,
    expect,
    json_dict,
    json_value,
    name_only,
    quoted_name,
    skip_ws,
    valid_name,
)
from proxy.repair.markup.families.tokens import FW
from proxy.repair.markup.spans import REFUSED, ParsedCall


class _Invokes(Closed):
    """Invoke blocks: `<invoke name="NAME">` holding `<parameter name="KEY" …>VALUE</parameter>`
    elements, several invokes in one block (MiniMax-M2, DeepSeek's DSML)."""

    _invoke: ClassVar[str] = "<invoke name="
    _invoke_end: ClassVar[str] = "</invoke>"
    _parameter: ClassVar[str] = "<parameter name="
    _parameter_end: ClassVar[str] = "</parameter>"
    strings: ClassVar[bool] = True
    self_closing: ClassVar[bool] = False
    """`<invoke name="NAME"/>` is a call with no arguments."""
    unwrap: ClassVar[bool] = False

    def name(self, span: str, opener: str) -> Named:
        found = expect(span, skip_ws(span, len(opener)), self._invoke)
        if found is None:
            return REFUSED
        if found == MORE or found == len(span):
            return None
        if span[found] == '"':
            return name_only(quoted_name(span, found))
        return name_only(bare_name(span, found, ">"))

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = skip_ws(body, 0)
        while position < len(body):
            head = self._tag(body, position, self._invoke)
            if head is None:
                return None
            attributes, after = head
            arguments: dict[str, Any] | None
            if attributes.endswith("/"):
                if not self.self_closing:
                    return None
                name, arguments, position = _unquote(attributes[:-1]), {}, after
            else:
                close = body.find(self._invoke_end, after)
                if close < 0:
                    return None
                name, arguments = _unquote(attributes), self._body(body[after:close])
                position = close + len(self._invoke_end)
            if arguments is None or not valid_name(name):
                return None
            calls.append(ParsedCall(name, arguments, strings=self.strings, unwrap=self.unwrap))
            position = skip_ws(body, position)
        return calls or None

    def _body(self, inner: str) -> dict[str, Any] | None:
        """The arguments an invoke's body holds: its parameters."""
        return self._parameters(inner)

    def _parameters(self, inner: str) -> dict[str, Any] | None:
        values: dict[str, Any] = {}
        position = skip_ws(inner, 0)
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
            position = skip_ws(inner, close + len(self._parameter_end))
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
    in one block. Values are bare text; MiniMax's servers strip the whitespace around them.
    `</minimax:tool_call>` is required: vLLM's minimax_m2_tool_parser.py reads calls only from
    `<minimax:tool_call>(.*?)</minimax:tool_call>`."""

    family = "minimax_m2"
    openers = ("<minimax:tool_call>",)
    closers = ("</minimax:tool_call>",)

    def _argument(self, attributes: str, value: str) -> tuple[str, Any] | None:
        return _unquote(attributes), value.strip()


_DSML = f"{FW}DSML{FW}"
_SPELLINGS = ("toolcalls", "tool", " calls", "calls", " call")
"""The block's opening tags DeepSeek V4 and V4.1 write beside `function_calls` / `tool_calls`:
V4's misspelt openers, and V4.1's spaced opener with the forms it decays to (vLLM's
`DSML_TOOL_START_VARIANTS` for each)."""


def _unspaced(text: str) -> str:
    """The DSML text with V4.1's space after the marker taken out of its tags (`<|DSML| invoke`
    is `<|DSML|invoke`), so one reading serves every spelling."""
    return text.replace(f"<{_DSML} ", f"<{_DSML}").replace(f"</{_DSML} ", f"</{_DSML}")


class DeepSeekDsml(_Invokes):
    """DeepSeek V3.2's DSML (its encoding script, `encoding_dsv32.py`): `<|DSML|function_calls>`
    holding `<|DSML|invoke name="NAME">` blocks of `<|DSML|parameter name="KEY" string="true">
    VALUE</|DSML|parameter>` (the bars fullwidth, as in every DeepSeek marker); later DeepSeek
    encodings name the block `tool_calls`. The model types each value itself: `string="true"` is
    the text as written, `string="false"` a JSON value. The block's closing tag is required:
    vLLM's deepseekv32_tool_parser.py reads calls only from `<|DSML|function_calls>(.*?)
    </|DSML|function_calls>`, and so does SGLang's deepseekv32_detector.py. Read as they read
    it too: an invoke whose body is the JSON arguments (SGLang's "Format 2", `_parse_parameters_
    from_xml`), a self-closing `<|DSML|invoke name="NAME"/>` for a tool with no parameters
    (SGLang's `_unpack_invoke_match`), and a lone `arguments` or `input` parameter wrapping the
    real arguments, unwrapped when the schema declares no such property (vLLM's
    `_repair_param_dict`, `DeclaredTools.unwrapped`).

    DeepSeek V4 and V4.1 write the block in spellings beside the canonical one, read as vLLM
    reads them (`vllm/parser/deepseek_v4.py` and `deepseek_v41.py`, each tag a terminal with
    its tolerated spellings, any closing tag ending any opened block): V4's `tool_calls` opener
    misspelt `toolcalls` or `tool` (`DSML_TOOL_START_VARIANTS`), and V4.1's encoder, which puts
    a space after the marker in every tag (`<|DSML| calls>`, `<|DSML| invoke name=…>`,
    `</|DSML| parameter>`), a space the model drops at times (`<|DSML|calls>`, `<|DSML| call>`,
    the unspaced V4 tags). `_SPELLINGS` lists them; the span is read with the tags' spacing
    taken out (`_unspaced`)."""

    family = "deepseek_dsml"
    openers = (
        f"<{_DSML}function_calls>",
        f"<{_DSML}tool_calls>",
        *(f"<{_DSML}{spelling}>" for spelling in _SPELLINGS),
    )
    closers = (f"</{_DSML}function_calls>", f"</{_DSML}tool_calls>", f"</{_DSML} calls>")
    _invoke = f"<{_DSML}invoke name="
    _invoke_end = f"</{_DSML}invoke>"
    _parameter = f"<{_DSML}parameter name="
    _parameter_end = f"</{_DSML}parameter>"
    strings = False
    self_closing = True
    unwrap = True
    _attributes = re.compile(r'\s*"([^"]+)"\s+string="(true|false)"\s*')

    def name(self, span: str, opener: str) -> Named:
        return super().name(opener + _unspaced(span[len(opener) :]), opener)

    def _parse(self, body: str) -> list[ParsedCall] | None:
        return super()._parse(_unspaced(body))

    def _body(self, inner: str) -> dict[str, Any] | None:
        if inner.lstrip().startswith("{"):
            return json_dict(inner)
        return self._parameters(inner)

    def _argument(self, attributes: str, value: str) -> tuple[str, Any] | None:
        typed = self._attributes.fullmatch(attributes)
        if typed is None:
            return None
        if typed[2] == "true":
            return typed[1], value
        decoded = json_value(value)
        return None if decoded is INVALID else (typed[1], decoded)
