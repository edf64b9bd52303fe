"""Explain's rows: the answer machine's record (answer_record.py) as the chat client is sent it.
Each upstream event the machine handled, with the chat events it became; then the closing
chunks the repairs added; then the end, in the chat rendering's own words (its `settle`:
`[DONE]` after a clean end, the error event after a cut or empty stream, nothing after the
upstream's own error, which went out in its place).

A front's client gets the front's events instead (front.py reads them off the same record);
its rows still say what the chat answer was, event by event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.explain.answer_record import AnswerRecord, Handled, Handling
from proxy.explain.attribution import Label
from proxy.repair.answer_ends import (
    Aborted,
    Clean,
    End,
    NoEvents,
    NotAnAnswer,
    Truncated,
    UpstreamError,
)
from proxy.repair.tally import Tally
from proxy.server.doors.chat import ChatRendering


@dataclass
class Row:
    """One upstream event (None: added by the proxy) and the client events sent for it."""

    upstream: bytes | None
    client: list[bytes]
    labels: list[Label] = field(default_factory=list)
    door: bytes = b""
    """What the door's rendering sent for it: a front's events (a chat client's are
    `client`)."""


ERROR_ENDS = Label("pipeline", {"upstream_error_event": 1}, "relayed; repairs end here")
AFTER_ERROR = Label("pipeline", {}, "after the upstream's error: as received")
DROPPED = Label("pipeline", {}, "dropped")


def chat_rows(record: AnswerRecord, body: bytes, chat_door: bool) -> list[Row]:
    """The rows of a streamed answer; `body` is the upstream's, decoded (for how its events
    were framed), `chat_door` whether the chat client was the one answered (else what the
    chat rendering counts is not the exchange's)."""
    raws = [handled.raw for handled in record.handled if handled.raw is not None]
    framing = iter(_framing(body, raws))
    end = record.end
    rows: list[Row] = []
    done: Row | None = None
    for handled in record.handled:
        said = next(framing) if handled.raw is not None else None
        row = _row(handled, [said] if said else [])
        if handled.handling is Handling.DONE:
            if done is None and isinstance(end, Clean) and end.done_seen:
                done = row  # the end, said once, after the closing chunks
                continue
            row.labels.append(DROPPED)
        rows.append(row)
    if end is not None:
        rows += _end_row(end, record, done, chat_door)
    return rows


def _row(handled: Handled, labels: list[Label]) -> Row:
    door = b"".join(handled.rendered or [])
    raw = handled.raw
    if handled.step is not None:  # a chunk the chain was handed, or one it added at the end
        return Row(raw, handled.step.client, labels + handled.step.labels, door)
    assert raw is not None
    if handled.handling is Handling.UPSTREAM_ERROR:
        labels.append(ERROR_ENDS)
    elif handled.handling is Handling.AFTER_ERROR:
        labels.append(AFTER_ERROR)
    return Row(raw, [] if handled.handling is Handling.DONE else [raw], labels, door)


def _end_row(end: End, record: AnswerRecord, done: Row | None, chat_door: bool) -> list[Row]:
    """The chat rendering's end after the last pieces, on the upstream's `[DONE]` when it
    sent one, else on a row of its own."""
    counted = Tally("explain")
    said = ChatRendering(counted, debug=False).settle(end, [])
    if not said:
        return []
    kinds = dict(counted.repairs) if chat_door else {}
    if isinstance(end, Aborted):
        kinds = {**record.end_kinds, **kinds}
    row = done or Row(None, [], [])
    row.client = [said]
    if kinds or done is None:
        row.labels.append(Label("pipeline", kinds, "added"))
    return [row]


def end_words(end: End | None, streamed: bool) -> tuple[str, str]:
    """The end's name and what it says, as explain shows them; ("", "") for none."""
    if isinstance(end, Clean):
        if not streamed:
            return "clean", "a chat completion"
        said = "the upstream's [DONE]" if end.done_seen else "finished, without a [DONE]"
        return "clean", said
    if isinstance(end, Truncated):
        return "truncated", end.message
    if isinstance(end, NoEvents):
        return "no events", end.message
    if isinstance(end, NotAnAnswer):
        return "not an answer", end.message
    if isinstance(end, UpstreamError):
        return "upstream error", "its own error ends the answer: nothing is invented after it"
    if isinstance(end, Aborted):
        return "aborted", end.message
    return "", ""


def _framing(body: bytes, raws: list[bytes]) -> list[Label | None]:
    """What the machine's decoding changed in each event's framing: an event cut off a
    single-newline stream, or the blank line added to the last one; None where it came as
    sent."""
    out: list[Label | None] = []
    offset = 0
    for raw in raws:
        if body.startswith(raw, offset):
            offset += len(raw)
            out.append(None)
            continue
        # The decoder terminated the event: find how much of it the upstream sent.
        offset += next(n for n in range(len(raw), -1, -1) if body.startswith(raw[:n], offset))
        if offset >= len(body):
            out.append(Label("pipeline", {}, "blank line added"))
        else:
            out.append(Label("pipeline", {"events_split": 1}, "split"))
    return out
