"""Reasoning written into one choice's `content`, told apart from the answer while it streams.

Two shapes reach the proxy as plain text when the serving layer runs without the model's
reasoning parser (vLLM's `--reasoning-parser`, SGLang's, llama.cpp's `--reasoning-format`):

- `<think>…</think>` before the answer (DeepSeek-R1 and its distills, QwQ, Qwen3). A chat
  template may write `<think>` into the prompt itself (DeepSeek-R1, Qwen3-Thinking-2507), and
  then only `</think>` arrives.
- gpt-oss's harmony framing: `<|channel|>analysis<|message|>…<|end|>` for the reasoning,
  `<|start|>assistant<|channel|>final<|message|>…<|return|>` for the answer. The first
  message has no `<|start|>assistant`: the prompt ends with it.

`ReasoningSplitter` is fed the content text piece by piece and answers each piece with the
reasoning and the content it can release now. Reasoning streams as it arrives; the only text
held is a possible opener at the start, and a possible closing marker cut by a piece boundary.
It does no I/O and knows nothing of chunks: the chain link (repairs/text_reasoning.py) does.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.repair.markup.families.tags import Glm
from proxy.repair.markup.spans import MarkupFamily

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_THINK_TAGS = (THINK_OPEN, THINK_CLOSE)

_HARMONY_START = "<|start|>"
_HARMONY_CHANNEL = "<|channel|>"
_HARMONY_END = "<|end|>"
_HARMONY_RETURN = "<|return|>"

WHITESPACE = " \t\r\n"
"""Whitespace allowed before an opener: ASCII only, so characters held are bytes held."""

LEADING_WHITESPACE_LIMIT = 16
"""More whitespace than this before anything else, and the content is no longer waiting for an
opener: models write a newline or two before `<think>`, not a page of blank lines."""


@dataclass(frozen=True, slots=True)
class _Span:
    """Text that goes to one side (reasoning or content) until one of its markers."""

    reasoning: bool
    closers: tuple[str, ...]
    """Markers that end the span and are removed with it."""
    stops: tuple[str, ...] = ()
    """Markers that end the span but begin what follows (the next harmony header), so they stay
    in the text for the opener that comes next."""
    ends: tuple[str, ...] = ()
    """Markers that end the span and go out with it (a harmony call's `<|call|>`, which the
    tool-call recogniser reads)."""
    keeps_opener: bool = False
    """The opener goes out as text too (a harmony call's header, for the recogniser)."""
    calls: tuple[tuple[str, MarkupFamily], ...] = ()
    """Openers of a call that ends the span where it begins, once the family reads its name
    there: the call and what follows are content, for the recogniser."""

    @property
    def markers(self) -> tuple[str, ...]:
        return self.closers + self.stops + self.ends + tuple(opener for opener, _ in self.calls)


CALL_NAME_WITHIN = 96
"""A call opener inside reasoning is held at most this long (opener, a 64-character tool name and
what follows it) while its family cannot yet say whether it is a call; then it is reasoning."""


# GLM-4.7 / 5.x go from thinking straight into a call, without `</think>`: vLLM's GLM-4.7
# parser reads `<tool_call>` as the end of the reasoning (vllm#56635, "an implicit reasoning
# terminator"). Only GLM's form ends it (a name, then `<arg_key>` or `</tool_call>`, as
# `Glm.name` reads it): a Hermes `<tool_call>{…}` written while thinking stays reasoning, as
# every other family's reasoning parser leaves it.
_THINK = _Span(reasoning=True, closers=(THINK_CLOSE,), calls=(("<tool_call>", Glm()),))
# A harmony message ends with `<|end|>` (`<|return|>` for the final one). A next header that
# begins without it ends the message too: otherwise a lost `<|end|>` would make the whole answer
# reasoning.
_ANALYSIS = _Span(reasoning=True, closers=(_HARMONY_END,), stops=(_HARMONY_START, _HARMONY_CHANNEL))
_FINAL = _Span(
    reasoning=False,
    closers=(_HARMONY_RETURN, _HARMONY_END),
    stops=(_HARMONY_START, _HARMONY_CHANNEL),
)

# A commentary message (preambles and tool calls, `<|start|>assistant to=functions.NAME…`) goes
# on as content unchanged, framing included, for the tool-call recogniser that runs next; but it
# is followed, so that the messages after it are told apart as the first one is: after a call's
# `<|call|>` the final channel's framing is removed too and only its text is content, as
# vLLM's and SGLang's harmony parsers (openai_harmony) put it there (issue 27).
_COMMENTARY = _Span(reasoning=False, closers=(), ends=("<|call|>", _HARMONY_END), keeps_opener=True)

# Harmony headers: analysis and final, whose framing is removed, and commentary, whose is kept.
_HARMONY_OPENERS: tuple[tuple[str, _Span], ...] = (
    *(
        (start + _HARMONY_CHANNEL + channel + "<|message|>", span)
        for start in ("", _HARMONY_START + "assistant")
        for channel, span in (("analysis", _ANALYSIS), ("final", _FINAL))
    ),
    *(
        (opener, _COMMENTARY)
        for opener in (
            _HARMONY_CHANNEL + "commentary",
            _HARMONY_START + "assistant" + _HARMONY_CHANNEL + "commentary",
            _HARMONY_START + "assistant to=",
        )
    ),
)
_OPENERS: tuple[tuple[str, _Span], ...] = ((THINK_OPEN, _THINK), *_HARMONY_OPENERS)

MAX_HELD = max(
    LEADING_WHITESPACE_LIMIT + max(len(opener) for opener, _ in _OPENERS), CALL_NAME_WITHIN
)
"""The most text a splitter ever holds: 96. Waiting for an opener holds the leading whitespace
and a prefix of the longest opener (`<|start|>assistant<|channel|>analysis<|message|>`, 48);
inside a span a prefix of a closing marker (11 at most), or a call opener whose family has not
decided yet (`CALL_NAME_WITHIN`)."""


class _Opening:
    """Waiting at the start of the content (or between harmony messages) for an opener."""

    __slots__ = ("fallback", "openers")

    def __init__(self, openers: tuple[tuple[str, _Span], ...], fallback: _Span | None) -> None:
        self.openers = openers
        self.fallback = fallback
        """What the text is when no opener comes: a span (the template opened `<think>`), or
        None for plain content."""


class _AfterThink:
    """Right after `</think>`: the whitespace that separates it from the answer goes, however
    much of it there is (nothing is held for it), and the answer is plain content."""


_AFTER_THINK = _AfterThink()


class ReasoningSplitter:
    """Splits one choice's content into reasoning and answer, piece by piece.

    Only a block at the very start counts (leading whitespace allowed): `<think>` later in an
    answer is the answer talking about tags, and is left alone. With `opened_by_template`, the
    content starts inside the block and is reasoning until `</think>`. If the stream then ends
    with no `</think>`, what was streamed stays reasoning: it went out as it arrived and cannot
    be called back. A model whose template does not open the block would lose its whole answer
    to the reasoning field that way, which is why `think_opened_by_template` is off by default.

    Without it, a `</think>` with no opener is left as text and noted in `unopened_close`: the
    sign that the template opens the block, and that the route should say so.
    """

    __slots__ = ("_held", "_state", "_tail", "unopened_close", "watching")

    def __init__(self, opened_by_template: bool = False) -> None:
        self._state: _Opening | _Span | _AfterThink | None = _Opening(
            _OPENERS, _THINK if opened_by_template else None
        )
        """None: plain content from here on."""
        self._held = ""
        self._tail = ""
        self.watching = not opened_by_template
        """Still looking through plain content for a `</think>` no opener preceded."""
        self.unopened_close = False

    @property
    def plain(self) -> bool:
        """Everything from here on is content, unchanged: the caller may skip `feed`."""
        return self._state is None

    @property
    def at_start(self) -> bool:
        """Nothing is decided yet: no text has gone out, to either side."""
        return isinstance(self._state, _Opening) and self._state.openers is _OPENERS

    @property
    def held(self) -> int:
        return len(self._held)

    def feed(self, piece: str) -> tuple[str, str]:
        """The reasoning and the content that `piece` releases, in that order within it."""
        if self._state is None:
            if self.watching:
                self.watch(piece)
            return "", piece
        reasoning: list[str] = []
        content: list[str] = []
        text = self._held + piece
        self._held = ""
        while text:
            state = self._state
            if state is None:
                if self.watching:
                    self.watch(text)
                content.append(text)
                break
            if isinstance(state, _AfterThink):
                text = text.lstrip(WHITESPACE)
                if text:
                    self._state = None
                continue
            if isinstance(state, _Opening):
                consumed = self._open(state, text)
                if consumed is None:
                    self._held = text
                    break
                text = text[consumed:]
                continue
            text = self._scan(state, text, reasoning if state.reasoning else content)
        return "".join(reasoning), "".join(content)

    def finish(self) -> tuple[str, str]:
        """The stream of this choice is over: what was held, released to its side. A held
        opener prefix was never an opener, so it is content as written."""
        held, state = self._held, self._state
        self._held = ""
        self._state = None
        self.watching = False
        if isinstance(state, _Span) and state.reasoning:
            return held, ""
        return "", held

    def give_up(self) -> str:
        """The upstream sends reasoning in its own field: no splitting for this choice. Returns
        the text held so far, as content."""
        held = self._held
        self._held = ""
        self._state = None
        self.watching = False
        return held

    def watch(self, text: str) -> bool:
        """Look through plain content for a `</think>` no `<think>` came before, without
        changing it. True the one time it is found; a tag cut across pieces is found too, from
        a remembered tail. A `<think>` first means the answer is talking about the tags: the
        watch ends there."""
        if self._tail:
            text = self._tail + text
        elif "<" not in text:
            return False  # the usual piece: no tag in it, none begun at its end
        close = text.find(THINK_CLOSE)
        opener = text.find(THINK_OPEN)
        if opener != -1 and (close == -1 or opener < close):
            self._tail = ""
            self.watching = False
            return False
        if close != -1:
            self._tail = ""
            self.watching = False
            self.unopened_close = True
            return True
        self._tail = text[_partial_marker(text, _THINK_TAGS) :]
        return False

    def _open(self, opening: _Opening, text: str) -> int | None:
        """How much of `text` the decision consumes, once it is made; None while undecided."""
        stripped = text.lstrip(WHITESPACE)
        leading = len(text) - len(stripped)
        if leading <= LEADING_WHITESPACE_LIMIT:
            if not stripped:
                return None
            undecided = False
            for opener, span in opening.openers:
                if stripped.startswith(opener):
                    self._state = span
                    self.watching = False
                    if span.keeps_opener:
                        return 0  # the span's text, opener and all, goes out as it came
                    return leading + len(opener)  # the opener and the whitespace before it go
                undecided = undecided or opener.startswith(stripped)
            if undecided:
                return None
        if opening.openers is not _OPENERS:
            self.watching = False  # between harmony messages: no `<think>` to look for
        self._state = opening.fallback
        return 0  # no opener: the text is released unchanged

    def _scan(self, span: _Span, text: str, out: list[str]) -> str:
        """Send `text` up to the span's first marker to `out`; return what follows it."""
        end = -1
        found = ""
        for marker in span.markers:
            at = text.find(marker)
            if at != -1 and (end == -1 or at < end):
                end, found = at, marker
        if end == -1:
            cut = _partial_marker(text, span.markers)
            if cut:
                out.append(text[:cut])
            self._held = text[cut:]
            return ""
        family = dict(span.calls).get(found)
        if family is not None:
            named = family.name(text[end:], found)
            if named is None and len(text) - end <= CALL_NAME_WITHIN:
                if end:
                    out.append(text[:end])
                self._held = text[end:]
                return ""
            if not isinstance(named, str):
                out.append(text[: end + len(found)])  # not the family's call: reasoning
                return text[end + len(found) :]
            if end:
                out.append(text[:end])
            self._state = None  # the call ends the reasoning; it and the rest are content
            self.watching = False
            return text[end:]
        if found in span.ends:
            end += len(found)  # the marker goes out with the span's text
        if end:
            out.append(text[:end])
        if span is _THINK:
            self._state = _AFTER_THINK
        else:
            self._state = _BETWEEN_MESSAGES
        return text[end + len(found) :] if found in span.closers else text[end:]


_BETWEEN_MESSAGES = _Opening(_HARMONY_OPENERS, None)


def _partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Where a trailing prefix of one of `markers` starts in `text` (len(text) when none): the
    part a piece boundary may have cut, held until the next piece says what it is."""
    longest = len(max(markers, key=len))
    at = text.find("<", max(0, len(text) - longest + 1))
    while at != -1:
        tail = text[at:]
        if any(marker.startswith(tail) for marker in markers):
            return at
        at = text.find("<", at + 1)
    return len(text)
