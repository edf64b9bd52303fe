"""Families whose markup is the model's special tokens written out as text: Kimi K2's
`<|tool_call_begin|>`, DeepSeek's like-named markers with fullwidth bars, and gpt-oss's harmony
`<|channel|>`, `<|message|>`, `<|call|>`; a call's parts sit between the tokens."""

from __future__ import annotations

import re

from proxy.repair.markup.families.reading import (
    MORE,
    Closed,
    Named,
    bare_name,
    expect,
    json_dict,
    name_only,
    skip_ws,
    valid_name,
)
from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall


class KimiK2(Closed):
    """Kimi K2 (Moonshot's chat template and tool-call guide): a section of calls, each
    `<|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{JSON}<|tool_call_end|>`.
    Some checkpoints write the section markers singular (`<|tool_call_section_begin|>`).
    vLLM's kimi_k2_tool_parser.py and SGLang's kimik2_detector.py match the calls, each up to
    its `<|tool_call_end|>`, not the section: the section's end is optional, a call's is not.
    Text between the section's begin and its first call (a model's stray `functions:`) is
    dropped, as those parsers drop it; between calls it still makes the span text."""

    family = "kimi_k2"
    closer_optional = True
    openers = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
    closers = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
    _begin = "<|tool_call_begin|>"
    _arguments = "<|tool_call_argument_begin|>"
    _end = "<|tool_call_end|>"
    _id = re.compile(r"(?:functions\.)?([\w.\-]+):\d+")
    """Kimi K2 writes ids as functions.NAME:N (N counts the calls of the conversation)."""

    def name(self, span: str, opener: str) -> Named:
        begin = span.find(self._begin, len(opener))
        closed = self._closer(span[: begin if begin >= 0 else len(span)], len(opener))
        if closed is not None:
            return REFUSED  # the section ended before any call began
        if begin < 0:
            return None  # noise before the first call, or the call's marker still coming
        found = begin + len(self._begin)
        named = name_only(bare_name(span, skip_ws(span, found), ":"))
        if isinstance(named, str):
            named = named.removeprefix("functions.") or REFUSED
        return named

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = body.find(self._begin)  # what comes before the first call is dropped
        if position < 0:
            return None
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
            arguments = None if close < 0 else json_dict(body[start:close])
            if matched is None or arguments is None:
                return None
            calls.append(ParsedCall(matched[1], arguments, id=call_id))
            position = skip_ws(body, close + len(self._end))
        return calls or None


FW = "\uff5c"  # FULLWIDTH VERTICAL LINE: DeepSeek's tokenizer spells its markers with it
_SP = "\u2581"  # LOWER ONE EIGHTH BLOCK, its word separator


def _deepseek(words: str) -> str:
    return f"<{FW}{words.replace(' ', _SP)}{FW}>"


class DeepSeek(Closed):
    """DeepSeek V3 / R1 and V3.1 / V3.2-Exp (their chat templates), one class because both share
    the markers and differ only inside a call. Written here with ASCII `|` and `_` for the
    fullwidth bar and the U+2581 separator of the real markers. V3.1:
    `<|tool_call_begin|>NAME<|tool_sep|>{JSON}<|tool_call_end|>`; V3 and R1 write the type
    first and fence the JSON: `<|tool_call_begin|>function<|tool_sep|>NAME\\n```json\\n{JSON}
    \\n```<|tool_call_end|>`. All calls sit in one `<|tool_calls_begin|>…<|tool_calls_end|>`.
    vLLM's deepseekv3/deepseekv31 parsers match each call up to its `<|tool_call_end|>`, not the
    block: the block's end is optional, a call's is not."""

    family = "deepseek"
    closer_optional = True
    openers = (_deepseek("tool calls begin"),)
    closers = (_deepseek("tool calls end"),)
    _begin = _deepseek("tool call begin")
    _sep = _deepseek("tool sep")
    _end = _deepseek("tool call end")
    _fenced = re.compile(r"([\w.\-]+)[ \t]*\n\s*```(?:json)?\s*\n(.*?)\s*```\s*", re.DOTALL)

    def name(self, span: str, opener: str) -> Named:
        found = expect(span, skip_ws(span, len(opener)), self._begin)
        if found is None:
            return REFUSED
        if found == MORE:
            return None
        word = bare_name(span, skip_ws(span, found), "<")
        if not isinstance(word, tuple):
            return word
        after = expect(span, word[1], self._sep)
        if after is None:
            return REFUSED
        if after == MORE:
            return None
        if word[0] != "function":
            return word[0]
        # V3 writes the type `function` here, V3.1 the name (a tool may be called `function`):
        # the JSON right after the separator says V3.1.
        following = skip_ws(span, after)
        if following == len(span):
            return None
        if span[following] == "{":
            return word[0]
        return name_only(bare_name(span, after, " \t\n"))

    def _parse(self, body: str) -> list[ParsedCall] | None:
        calls = []
        position = skip_ws(body, 0)
        while position < len(body):
            if not body.startswith(self._begin, position):
                return None
            sep = body.find(self._sep, position)
            if sep < 0:
                return None
            word = body[position + len(self._begin) : sep]
            start = sep + len(self._sep)
            close = body.find(self._end, start)
            call = None if close < 0 else self._call(word, body[start:close])
            if call is None:
                return None
            calls.append(call)
            position = skip_ws(body, close + len(self._end))
        return calls or None

    def _call(self, word: str, rest: str) -> ParsedCall | None:
        if word == "function" and not rest.lstrip().startswith("{"):
            fenced = self._fenced.fullmatch(rest)
            if fenced is None:
                return None
            word, rest = fenced[1], fenced[2]
        arguments = json_dict(rest)
        if not valid_name(word) or arguments is None:
            return None
        return ParsedCall(word, arguments)


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

    def name(self, span: str, opener: str) -> Named:
        position = len(opener)
        if opener == "<|start|>":
            after = expect(span, position, "assistant")
            if after is None:
                return REFUSED
            if after == MORE or after == len(span):
                return None
            if span[after] != "<":
                return self._recipient(span, after)
            after = expect(span, after, "<|channel|>")
            if after is None:
                return REFUSED
            if after == MORE:
                return None
            position = after
        channel_end = position
        while channel_end < len(span) and span[channel_end].isalpha():
            channel_end += 1
        if channel_end == len(span):
            return None
        return self._recipient(span, channel_end) if channel_end > position else REFUSED

    @staticmethod
    def _recipient(span: str, at: int) -> Named:
        """` to=functions.NAME` at `at`, whole once the space or `<` after the name shows."""
        if at == len(span):
            return None
        if not span[at].isspace():
            return REFUSED
        found = expect(span, skip_ws(span, at), "to=functions.")
        if found is None:
            return REFUSED
        if found == MORE:
            return None
        return name_only(bare_name(span, found, " \t\n<"))

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
        arguments = json_dict(span[header.end() :].removesuffix(self._close))
        return None if arguments is None else [ParsedCall(names[0], arguments)]
