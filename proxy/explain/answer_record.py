"""What the answer machine did with each upstream event, as `streamfix explain` shows it.

Explain's machine is the server's (repair/answer.py), run event by event: before and after
each event it reads what the machine left (its end, the chain's steps, the pieces it handed
on), so the record says what the machine did, never what explain thinks it should have done.
The door's rendering is watched the same way: each event's pieces rendered on their own, which
is how a rendering renders a list of them (repair/rendering.py). The server's machine is
untouched: its hot loop pays nothing for this.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from proxy.explain.attribution import AttributingChain, Step
from proxy.repair.answer import AnswerMachine
from proxy.repair.answer_ends import Clean, End, Piece, Whole
from proxy.repair.rendering import Rendering
from proxy.repair.tally import Tally


class Handling(Enum):
    """What the machine did with one upstream event."""

    CHUNK = "a chunk for the chain"
    PASSED = "passed as received"
    DONE = "[DONE]: held, the door says the end"
    UPSTREAM_ERROR = "the upstream's own error: the answer ends here"
    AFTER_ERROR = "after the upstream's error: bytes as received"
    CLOSING = "a closing chunk the repairs added"


@dataclass
class Handled:
    """One upstream event (None: a closing chunk) and what became of it."""

    raw: bytes | None
    handling: Handling
    pieces: list[Piece]
    """What the machine handed the door for it."""
    step: Step | None = None
    """The chain's step, for a chunk it was handed."""
    rendered: list[bytes] | None = None
    """What the door's rendering made of each piece; None while not rendered (or never: a
    whole answer, or an event after the upstream's error that a door stops reading at)."""


@dataclass
class AnswerRecord:
    """One exchange's answer as the machine and the door's rendering went through it."""

    mode: str = "stream"
    """`stream`, `json` (one body) or `folded` (a stream folded into one body)."""
    handled: list[Handled] = field(default_factory=list)
    end: End | None = None
    end_kinds: dict[str, int] = field(default_factory=dict)
    """What the machine counted deciding an end that was not clean (a clean end's closing
    chunks carry their repairs' kinds)."""
    start: bytes = b""
    end_bytes: bytes = b""
    """What the rendering's `settle` said after the last pieces: its closing events, `[DONE]`
    or the error event."""
    terminal: bytes = b""
    heartbeats: list[bytes] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    """What the door's rendering counted, booked on the exchange."""
    in_step: bool = True
    """Whether the rendering was handed exactly the recorded pieces, event by event."""


class RecordingMachine(AnswerMachine):
    """The answer machine, recording each event it handles on `record`."""

    def __init__(
        self,
        chain: AttributingChain,
        tally: Tally,
        max_event_bytes: int | None,
        record: AnswerRecord,
    ) -> None:
        super().__init__(chain, tally, max_event_bytes)
        self.record = record
        self._steps = chain.steps
        self._tally_of = tally

    def pieces_of(self, events: list[Any]) -> list[Piece]:
        out: list[Piece] = []
        for event in events:
            ended, steps = self.end is not None, len(self._steps)
            pieces = super().pieces_of([event])
            step = self._steps[steps] if len(self._steps) > steps else None
            handling = _handling(ended, self.end is not None, step, pieces)
            self.record.handled.append(Handled(event.raw, handling, pieces, step))
            self.record.end = self.end
            out += pieces
        return out

    async def ran_out(self) -> tuple[list[Piece], End]:
        steps, before = len(self._steps), Counter(self._tally_of.repairs)
        closing, end = await super().ran_out()
        for step in self._steps[steps:]:
            self.record.handled.append(Handled(None, Handling.CLOSING, step.pieces, step))
        if not isinstance(end, Clean):
            self.record.end_kinds = dict(self._tally_of.repairs - before)
        self.record.end = end
        return closing, end

    def broke_off(self, reason: str, message: str, code: str) -> End:
        before = Counter(self._tally_of.repairs)
        end = super().broke_off(reason, message, code)
        kinds = self._tally_of.repairs - before
        del kinds["events_split"]  # the framing's, shown on the events it split
        self.record.end_kinds, self.record.end = dict(kinds), end
        return end

    def count(self, kind: str, amount: int) -> None:
        self.record.counts[kind] += amount
        super().count(kind, amount)

    def watched(self, rendering: Rendering) -> Rendering:
        return RecordedRendering(rendering, self.record)

    async def whole(self, raw: bytes) -> Whole:
        self.record.mode = "json"
        whole = await super().whole(raw)
        self.record.end = whole.end
        return whole

    async def folded(self, raw: bytes) -> Whole:
        self.record.mode = "folded"
        whole = await super().folded(raw)
        self.record.end = whole.end
        return whole


def _handling(ended: bool, ends: bool, step: Step | None, pieces: list[Piece]) -> Handling:
    """What the machine did with an event, from what it left: an end it had already decided
    or decided now, a step of the chain, pieces handed on, or nothing at all."""
    if ended:
        return Handling.AFTER_ERROR
    if ends:
        return Handling.UPSTREAM_ERROR
    if step is not None:
        return Handling.CHUNK
    return Handling.PASSED if pieces else Handling.DONE


class RecordedRendering:
    """A door's rendering, watched: what it renders for each recorded event is kept on it."""

    __slots__ = ("_inner", "_next", "_record")

    def __init__(self, inner: Rendering, record: AnswerRecord) -> None:
        self._inner = inner
        self._record = record
        self._next = 0  # the first recorded event not rendered yet

    @property
    def counts(self) -> dict[str, int]:
        return self._inner.counts

    @property
    def relays_bytes(self) -> bool:
        return self._inner.relays_bytes

    @property
    def answer_id(self) -> str:
        return self._inner.answer_id

    def start(self) -> bytes:
        self._record.start = self._inner.start()
        return self._record.start

    def pieces(self, pieces: list[Piece]) -> bytes:
        pending = self._record.handled[self._next :]
        self._next = len(self._record.handled)
        recorded = [piece for handled in pending for piece in handled.pieces]
        same = len(recorded) == len(pieces)
        if not (same and all(a is b for a, b in zip(recorded, pieces, strict=True))):
            self._record.in_step = False  # said by explain: its rows are not the stream's
            return self._inner.pieces(pieces)
        out: list[bytes] = []
        for handled in pending:
            handled.rendered = [self._inner.pieces([piece]) for piece in handled.pieces]
            out += handled.rendered
        return b"".join(out)

    def heartbeat(self) -> bytes:
        beat = self._inner.heartbeat()
        self._record.heartbeats.append(beat)
        return beat

    def settle(self, end: End, last: list[Piece]) -> bytes:
        rendered = self.pieces(last)
        self._record.end_bytes = self._inner.settle(end, [])
        return rendered + self._record.end_bytes

    def terminal(self) -> bytes:
        self._record.terminal = self._inner.terminal()
        return self._record.terminal

    def turn(self) -> dict[str, Any] | None:
        return self._inner.turn()
