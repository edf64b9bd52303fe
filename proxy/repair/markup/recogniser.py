"""Tool-call markup in one choice's content text, recognised while it streams.

Fed the content piece by piece, the recogniser gives back the text to send now and the calls
it recognised. It holds back only what could still be markup: a partial opener at the end of
a piece (a few dozen characters), a span whose call name has not shown yet (at most
`NAME_WITHIN` characters), and a span that names a declared tool until it closes. Plain text
with none of the openers' first characters goes straight through, untouched.

A span becomes calls only when every call in it names a declared tool and its arguments
validate against that tool's schema; otherwise the span goes out as text, exactly as received,
and the refusal is counted. Openers inside a fenced code block are text. A span still open when
the upstream stops for length goes out as text: a cut-off call is never made to look whole; so
does one still open at a normal finish, unless the family's servers read calls without its
closing marker (`MarkupFamily.end` decides, each family citing its servers' parsers).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.repair.calls.declared import INVALID_ARGUMENTS_KIND, UNDECLARED_KIND, DeclaredTools
from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall
from proxy.wire import json_codec

Count = Callable[[str, int], None]

NAME_WITHIN = 256
"""Characters after an opener within which a call's name must show, or the span is text: a
tag mentioned in prose is released after this much at worst (every family names its call
in its first few dozen characters)."""

FENCE = "```"
ENDINGS = ">}])"
"""The characters every family's markup ends with (a closing tag, `<|call|>`, `}`, `]`)."""
SMALL_SPAN = 4096
SLICE = 1024
"""A longer piece (a whole non-streamed answer) is fed in slices of this many characters: a
span opened in a piece holds the rest of that piece, and an opener refused at once sends the
rest back to be scanned again, so a huge piece full of openers would cost quadratic work.
Fed in slices, it costs what the same text streamed costs (the output is the same: any split
of the content gives the same text and calls)."""
MAX_HELD_WHITESPACE = 256
"""Whitespace after a call is held (and dropped if another call or the end follows) up to this."""


@dataclass(frozen=True, slots=True)
class RecognisedCall:
    name: str
    arguments: str
    """The arguments as JSON text, as the client receives them."""
    id: str | None
    family: MarkupFamily


@dataclass(slots=True)
class _Span:
    """Markup being held. Pieces are kept in a list and joined only when a family is asked,
    so a span that arrives a byte at a time costs linear time, not quadratic."""

    first: str
    candidates: list[tuple[MarkupFamily, str]]
    """The families whose opener began the span and that have not refused it yet."""
    opener: int = 0
    """Characters of the opener that a released span sends before scanning again: the marker
    found mid-text; none for a span that only began the content (see `_release_opener`)."""
    chosen: tuple[MarkupFamily, str] | None = None
    parts: list[str] = field(default_factory=list)
    size: int = 0
    next_check: int = 0
    """The size at which the span's end is looked for again regardless of what arrived."""
    armed: bool = False
    """A small span received one of `ENDINGS` and no text since: a family whose markup has no
    closing marker (Mistral, Llama JSON, pythonic) ends the span once text follows the value."""

    def __post_init__(self) -> None:
        self.parts = [self.first]
        self.size = len(self.first)

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    @property
    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts = ["".join(self.parts)]
        return self.parts[0]

    def worth_checking(self, piece: str) -> bool:
        """Whether to ask the family for the span's end now. Every family's markup ends in
        one of `ENDINGS`, so a piece without one cannot have closed a small span; past
        `SMALL_SPAN` the end is looked for as the span grows by an eighth, so an upstream
        feeding a huge span in tiny pieces costs linear work (the end is still found: at the
        latest when the answer finishes). After a piece with one of `ENDINGS`, the pieces up
        to the next one with text are worth checking too: the value may have closed, and the
        text after it ends the span (it would otherwise wait for the next bracket, or the end
        of the answer). That is one more look per such piece, bounded like the rest."""
        if self.size >= self.next_check:
            self.next_check = self.size + max(SMALL_SPAN, self.size // 8)
            self.armed = any(char in piece for char in ENDINGS)
            return True
        if self.size > SMALL_SPAN:
            return False
        if any(char in piece for char in ENDINGS):
            self.armed = True
            return True
        if self.armed:
            self.armed = not piece.strip()
            return True
        return False


class CallRecogniser:
    def __init__(
        self,
        families: Sequence[MarkupFamily],
        tools: DeclaredTools,
        count: Count,
        max_span_chars: int,
    ) -> None:
        self._tools = tools
        self._count = count
        self._max_span = max_span_chars
        self._anywhere = [(f, o) for f in families for o in f.openers if not f.at_start_only]
        self._at_start = [(f, o) for f in families for o in f.openers if f.at_start_only]
        openers = sorted({o for _, o in self._anywhere}, key=len, reverse=True)
        self._openers = openers
        self._markers = [*openers, FENCE]
        self._start_markers = sorted({o for _, o in self._at_start}, key=len, reverse=True)
        self._markers_at_start = [*self._start_markers, *openers]
        first_chars = sorted({marker[0] for marker in self._markers})
        # One regex search is the cheapest "could this piece start a marker?" test per chunk.
        self._could_open = re.compile("[" + "".join(map(re.escape, first_chars)) + "]").search
        self._opener_chars = frozenset(opener[0] for opener in openers)
        self._longest = max(len(m) for m in [*self._markers, *self._start_markers])
        self._pending = ""
        self._span: _Span | None = None
        self._at_start_of_content = True
        self._in_fence = False
        self._before = ""
        """The character sent just before the text being scanned: an opener right after a
        backtick is inline code, however the pieces fell."""
        self._ticks = 0
        """Backticks that ended the text sent so far: a fence may be split across pieces, and
        holding a lone backtick back would delay every inline `code` span."""
        self._after_call = False
        self.recognised = 0

    def feed(self, text: str) -> tuple[str, list[RecognisedCall]]:
        """The text to send now (`text` itself when nothing was held or changed), and the calls
        recognised by this piece."""
        if (
            self._span is None
            and not self._pending
            and not self._at_start_of_content
            and not self._after_call
            and not self._ticks
            and not self._could_open(text)
        ):
            if text:
                self._before = text[-1]
            return text, []  # the fast path: no opener, fence or partial one can be in here
        if len(text) > SLICE:
            texts, calls = [], []
            for start in range(0, len(text), SLICE):
                sent, found = self._run(text[start : start + SLICE], final=False, truncated=False)
                texts.append(sent)
                calls.extend(found)
            return "".join(texts), calls
        return self._run(text, final=False, truncated=False)

    def finish(self, truncated: bool) -> tuple[str, list[RecognisedCall]]:
        """The content ended (`truncated`: by the length limit): release everything held."""
        return self._run("", final=True, truncated=truncated)

    def _run(self, text: str, final: bool, truncated: bool) -> tuple[str, list[RecognisedCall]]:
        out: list[str] = []
        calls: list[RecognisedCall] = []
        if self._span is not None:
            span = self._span
            span.add(text)
            if (
                final
                or span.chosen is None
                or span.worth_checking(text)
                or span.size > self._max_span
            ):
                self._grow(out, calls, final, truncated)
        else:
            self._pending += text
        while self._span is None and self._pending:
            pending, self._pending = self._pending, ""
            self._scan(pending, out, final)
            if self._span is not None:
                self._grow(out, calls, final, truncated)
            elif self._pending == pending:
                break  # all of it held: wait for the next piece
        return "".join(out), calls

    # ── text outside spans ───────────────────────────────────────────────────────────────

    def _scan(self, text: str, out: list[str], final: bool) -> None:
        """Send `text` on up to the next opener (then open a span there) or a held tail."""
        if self._after_call:
            stripped = text.lstrip()
            if not stripped and not final and len(text) <= MAX_HELD_WHITESPACE:
                self._pending = text  # after a call: dropped if a call or the end follows
                return
            self._after_call = False
            if stripped is not text:
                self._before = ""  # the whitespace was dropped: nothing precedes for the client
            text = stripped
        before = self._before
        position = 0
        if self._at_start_of_content:
            lead = len(text) - len(text.lstrip())
            if lead == len(text):
                out.append(text)  # only whitespace so far: the start may still come
                self._before = text[-1]
                return
            start = self._start_opener(text, lead, final)
            if start is None:
                self._pending = text  # a prefix of a start-only opener: wait for more
                return
            self._at_start_of_content = False
            if start:
                self._ticks = 0
                out.append(text[:lead])
                self._before = text[lead - 1] if lead else before
                self._span = _Span(text[lead:], start)
                return
        leading = len(text) - len(text.lstrip("`"))
        if self._ticks and leading:
            # A run of backticks split between pieces: its fences are counted whole here, as
            # in one piece (every three backticks of the run toggle), the rest carried on.
            run = self._ticks + leading
            if (run // len(FENCE)) % 2:
                self._in_fence = not self._in_fence
            self._ticks = run % len(FENCE)
            position = leading
            out.append(text[:leading])
        found_at: dict[str, int] = {}
        while True:
            found = self._next_marker(text, position, found_at)
            if found is None:
                break
            index, marker = found
            if marker == FENCE:
                self._in_fence = not self._in_fence
                self._ticks = 0
                out.append(text[position : index + len(FENCE)])
                position = index + len(FENCE)
                continue
            quoted = (text[index - 1] if index else before) == "`"
            if self._in_fence or quoted:
                # Inside a fence, or right after a backtick (inline code: `<tool_call>…`): an
                # example of the markup, not a call.
                self._count("text_tool_call_in_code", 1)
                out.append(text[position : index + len(marker)])
                position = index + len(marker)
                self._ticks = 0
                continue
            out.append(text[position:index])
            self._before = text[index - 1] if index else before
            self._ticks = 0  # text ends before the opener: no backtick run reaches past it
            candidates = [(f, o) for f, o in self._anywhere if text.startswith(o, index)]
            self._span = _Span(text[index:], candidates, opener=len(marker))
            return
        held = 0 if final else self._partial_tail(text, position)
        sent = text[position : len(text) - held]
        out.append(sent)
        self._pending = text[len(text) - held :]
        if len(text) > held:
            self._before = text[len(text) - held - 1]
        if held:
            self._ticks = 0  # the held tail begins with an opener's character, not a backtick
        else:
            trailing = len(sent) - len(sent.rstrip("`"))
            self._ticks = self._ticks + trailing if trailing == len(sent) else trailing

    def _start_opener(
        self, text: str, lead: int, final: bool
    ) -> list[tuple[MarkupFamily, str]] | None:
        """At the start of the content: the start-only families whose opener begins `text`
        after its whitespace; [] when none can; None while the text is a prefix of one."""
        rest = text[lead:]
        matched = [(f, o) for f, o in self._at_start if rest.startswith(o)]
        if not final and any(o.startswith(rest) and o != rest for o in self._markers_at_start):
            return None  # a longer opener may still be coming (`[TOOL_CALLS]` after `[`)
        return matched

    def _next_marker(
        self, text: str, position: int, found_at: dict[str, int]
    ) -> tuple[int, str] | None:
        """The earliest marker at or after `position`. Each marker's last find is kept in
        `found_at` and searched again only once passed, so text full of fences costs one pass
        per marker, not one per fence."""
        best: tuple[int, str] | None = None
        for marker in self._markers:
            index = found_at.get(marker)
            if index is None or 0 <= index < position:
                index = found_at[marker] = text.find(marker, position)
            if index >= 0 and (best is None or index < best[0]):
                best = (index, marker)  # longest first: a tie keeps the longer marker
        return best

    def _partial_tail(self, text: str, position: int) -> int:
        """Length of the longest tail of `text[position:]` that begins some marker."""
        start = max(position, len(text) - self._longest + 1)
        for index in range(start, len(text)):
            if text[index] in self._opener_chars:
                tail = text[index:]
                if any(opener.startswith(tail) for opener in self._openers):
                    return len(text) - index
        return 0

    # ── spans ────────────────────────────────────────────────────────────────────────────

    def _grow(
        self, out: list[str], calls: list[RecognisedCall], final: bool, truncated: bool
    ) -> None:
        span = self._span
        assert span is not None
        if span.chosen is None and not self._choose(span):
            if span.candidates and not final and span.size <= NAME_WITHIN:
                return  # the name may still come
            if span.candidates and truncated:
                self._count("text_tool_call_truncated", 1)
            self._release_opener(span, out)
            return
        family, opener = span.chosen  # type: ignore[misc]
        # Cut by length, the span ends only where it closed before the cut (a span looked at
        # only as it grows may have closed unseen); the end of the text is no end for it.
        end = family.end(span.text, opener, final and not truncated)
        if end is None:
            if truncated or final:
                if truncated:
                    self._count("text_tool_call_truncated", 1)
                else:
                    self._count("text_tool_call_unclosed", 1)
                self._release(span, len(span.text), out)
            elif span.size > self._max_span:
                self._count("text_tool_call_too_long", 1)
                self._release(span, len(span.text), out)
            return
        parsed = family.calls(span.text[:end], opener)
        accepted = self._accepted(parsed, family) if parsed is not None else None
        if parsed is None:
            self._count("text_tool_call_unparsed", 1)
        if accepted is None:
            self._release(span, end, out)
            return
        calls.extend(accepted)
        self._count("text_tool_call", len(accepted))
        self.recognised += len(accepted)
        self._span = None
        self._after_call = True
        self._before = span.text[end - 1]
        self._pending = span.text[end:] + self._pending

    def _choose(self, span: _Span) -> bool:
        """Ask each candidate family for the span's first name; True once one has named a
        declared tool. A name the request did not declare refuses the span for every family."""
        for candidate in list(span.candidates):
            family, opener = candidate
            name = family.name(span.text, opener)
            if name is REFUSED:
                span.candidates.remove(candidate)
            elif isinstance(name, str):
                if name not in self._tools:
                    self._count(UNDECLARED_KIND, 1)
                    span.candidates.clear()
                    return False
                span.chosen = candidate
                return True
        return False

    def _accepted(
        self, parsed: list[ParsedCall], family: MarkupFamily
    ) -> list[RecognisedCall] | None:
        """Every call of the span, checked; None (the span stays text) if any is refused."""
        accepted = []
        for call in parsed:
            arguments = call.arguments
            if call.strings and isinstance(arguments, dict):
                arguments = self._tools.typed(call.name, arguments)
            if call.unwrap:
                arguments = self._tools.unwrapped(call.name, arguments)
            refusal = self._tools.check(call.name, arguments)
            if refusal is not None:
                self._count(refusal, 1)
                return None
            try:
                text = json_codec.dumps(arguments).decode()
            except (TypeError, ValueError, RecursionError):
                # Nested past what a JSON writer takes: it cannot go out as received, and a
                # changed value would be an invented call.
                self._count(INVALID_ARGUMENTS_KIND, 1)
                return None
            accepted.append(RecognisedCall(call.name, text, call.id, family))
        return accepted or None

    def _release_opener(self, span: _Span, out: list[str]) -> None:
        """Not markup after all: the opener goes out as text, and what followed it is scanned
        again (it may hold a real opener). A span opened only because it began the content is
        scanned again whole, as ordinary text (`[TOOL_CALLS]` refused as a pythonic list is
        still Mistral's opener)."""
        self._span = None
        out.append(span.text[: span.opener])
        if span.opener:
            self._before = span.text[span.opener - 1]
        self._pending = span.text[span.opener :] + self._pending

    def _release(self, span: _Span, end: int, out: list[str]) -> None:
        """A refused span goes out exactly as received; scanning goes on after it. Its text
        is text like any other: a fence inside it opens or closes a code block for the client,
        so for what follows too."""
        self._span = None
        released = span.text[:end]
        if released.count(FENCE) % 2:
            self._in_fence = not self._in_fence
        out.append(released)
        self._before = released[-1]
        self._pending = span.text[end:] + self._pending
