"""The answer machine: one upstream answer, from what the upstream sends to what a door
renders, with an explicit end. Every door (chat completions, Responses, Messages),
`streamfix replay` and `streamfix explain` drive this one machine; what differs between them
is only how a door renders its pieces and its end (server/doors/).

It is sans-I/O: it is handed the upstream's bytes as they arrive (`feed`), told when they ran
out (`finish`) or broke off (`broke_off`), or handed one whole body (`whole`, `folded`). It
reads no socket and keeps no clock; silence is the driver's (one keepalive timer per stream).

How an answer can end (answer_ends.py) is decided here and nowhere else.
"""

from __future__ import annotations

from typing import Any

from proxy.repair.answer_ends import (
    CLEAN,
    NO_ANSWER,
    NO_EVENTS,
    NOT_A_COMPLETION,
    UNFINISHED,
    Clean,
    End,
    NoEvents,
    NotAnAnswer,
    Piece,
    Truncated,
    UpstreamError,
    Whole,
)
from proxy.repair.pipeline import RepairChain
from proxy.repair.rendering import Rendering
from proxy.repair.stream_fold import folded_completion
from proxy.repair.tally import Tally
from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder


def _uncounted(kind: str, amount: int) -> None:
    """The default `count`: an answer run without an exchange to book on."""


class AnswerMachine:
    """One exchange's answer through its repair chain (phase two). `end` is None until the
    answer's end is decided; from the upstream's own error on, `feed` hands back its bytes as
    received and repairs nothing."""

    __slots__ = (
        "_chain",
        "_done",
        "_finished",
        "_heard",
        "_max_event_bytes",
        "_sse",
        "_tally",
        "end",
    )

    def __init__(self, chain: RepairChain, tally: Tally, max_event_bytes: int | None) -> None:
        self._chain = chain
        self._tally = tally
        self._max_event_bytes = max_event_bytes
        self._sse: SSEDecoder | None = None  # made by the first feed: a whole body needs none
        self._heard = False  # an event with data came
        self._finished = False  # the upstream said a finish reason
        self._done = False  # the upstream said `[DONE]`
        self.end: End | None = None

    # ── a stream ───────────────────────────────────────────────────────────

    def feed(self, data: bytes) -> list[Piece]:
        """The pieces of the events `data` completes (SSE framing is the decoder's)."""
        sse = self._sse
        if sse is None:
            sse = self._sse = SSEDecoder(self._max_event_bytes)
        return self.pieces_of(sse.feed(data))

    async def finish(self) -> tuple[list[Piece], End]:
        """The upstream's body ran out: the last events' pieces, the repairs' closing chunks
        on a clean end, and the end."""
        out = self.pieces_of(self._sse.flush()) if self._sse is not None else []
        self._count_framing()
        end = self.end
        if end is None:
            closing, end = await self.ran_out()
            out += closing
        return out, end

    async def ran_out(self) -> tuple[list[Piece], End]:
        """The end of a stream that ran out before its own error ended it: no event, no
        finish (truncated), or clean, with the repairs' closing chunks."""
        end: End
        closing: list[Piece] = []
        if not self._heard:
            self._tally.note("stream_aborted", "the upstream's stream held no event")
            end = NO_EVENTS
        elif not (self._done or self._finished):
            self._tally.note("stream_aborted", "the upstream's stream ended unfinished")
            end = Truncated(UNFINISHED, "upstream_truncated")
        else:
            closing += await self._chain.on_end()
            end = Clean(self._done)
        self.end = end
        return closing, end

    def broke_off(self, reason: str, message: str, code: str) -> End:
        """Reading the upstream failed (`reason`: what failed, for the log): truncated, unless
        its own error already ended the answer."""
        self._count_framing()
        if self.end is None:
            self._tally.note("stream_aborted", "upstream stream failed: %s", reason)
            self.end = Truncated(message, code)
        return self.end

    def count(self, kind: str, amount: int) -> None:
        """What the door's rendering did, on the exchange's tally beside the repairs."""
        self._tally.count(kind, amount)

    def watched(self, rendering: Rendering) -> Rendering:
        """The rendering this answer's pieces go to: the door's own (`streamfix explain`'s
        machine watches what it renders for each upstream event)."""
        return rendering

    def _count_framing(self) -> None:
        sse = self._sse
        if sse is not None:
            splits, sse.splits = sse.splits, 0
            self._tally.count("events_split", splits)

    def pieces_of(self, events: list[Any]) -> list[Piece]:
        """The pieces of decoded events, in order.

        Only a JSON object in an event without a name (or named `message`) is a chunk for
        the links; one with a top-level `error` is the upstream's own error, as is an event
        named `error` (the OpenAI SDK raises on any data whose `error` is set, the AI SDK
        ends with an error). `[DONE]` is the door's to say, once, after the closing chunks.
        """
        # The hot loop, inlined: most events are untouched chunks, handed on with their own
        # bytes, and a call per test per event is a measurable share of a stream's cost.
        out: list[Piece] = []
        append = out.append
        on_chunk = self._chain.on_chunk
        finished = self._finished
        ended = self.end is not None
        heard = self._heard
        for event in events:
            raw = event.raw
            data = event.data
            if ended or data is None:  # after its own error; a comment
                append((None, raw))
                continue
            heard = True
            name = event.event
            chunk: Any = None
            if (name is None or name == "message") and data[:1] == "{":
                try:
                    chunk = json_codec.loads(data)
                except json_codec.JSONDecodeError:
                    chunk = None
                if chunk.__class__ is not dict:
                    chunk = chunk if isinstance(chunk, dict) else None
            if chunk is not None:
                if chunk.get("error"):
                    self._upstream_error(chunk, raw)
                    ended = True
                    append((None, raw))
                    continue
                if not finished:
                    choices = chunk.get("choices")
                    if choices and isinstance(choices, list):
                        for choice in choices:
                            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                                finished = self._finished = True
                out += on_chunk(chunk, raw)
            elif name == "error":
                self._upstream_error(_said(data), raw)
                ended = True
                append((None, raw))
            elif data.strip() == "[DONE]":
                self._done = True
            else:
                append((None, raw))
        self._heard = heard
        return out

    def _upstream_error(self, body: Any, raw: bytes) -> None:
        self._tally.count("upstream_error_event", 1)
        self.end = UpstreamError(body, raw)

    # ── one body ───────────────────────────────────────────────────────────

    async def whole(self, raw: bytes) -> Whole:
        """A non-streamed answer: repaired through the stream links as a one-event stream
        (pipeline.py `on_response`). An error in a 200 body is the upstream's error; a body
        that is not a completion is not an answer; either goes on as received where it may."""
        try:
            body = json_codec.loads(raw)
        except json_codec.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return self._ended(Whole(None, False, raw, NotAnAnswer(NOT_A_COMPLETION)))
        if body.get("error") and not body.get("choices"):
            return self._ended(Whole(None, False, raw, UpstreamError(body, raw)))
        if not isinstance(body.get("choices"), list):
            return self._ended(Whole(None, False, raw, NotAnAnswer(NOT_A_COMPLETION)))
        changed = await self._chain.on_response(body)
        return self._ended(Whole(body, changed, raw, CLEAN))

    async def folded(self, raw: bytes) -> Whole:
        """A streamed answer to a client that asked for one whole: its events repaired as any
        stream's are, folded into the completion the repaired chunks say (stream_fold.py)."""
        pieces = self.feed(raw)
        more, end = await self.finish()
        if not isinstance(end, Clean):
            return Whole(None, False, raw, end, as_received=False)
        chunks = [chunk for chunk, _ in pieces + more if chunk is not None]
        completion = folded_completion(chunks)
        if completion is None:
            self.end = NoEvents(NO_ANSWER, "upstream_no_events")
            return Whole(None, False, raw, self.end, as_received=False)
        self._tally.count("stream_folded", 1)
        return Whole(completion, True, raw, end, as_received=False)

    def _ended(self, whole: Whole) -> Whole:
        self.end = whole.end
        return whole


def _said(data: str) -> Any:
    """An error event's data (Groq's `event: error`): its JSON when it is an object, else its
    text as the message."""
    if data.startswith("{"):
        try:
            parsed = json_codec.loads(data)
        except json_codec.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"message": data}
