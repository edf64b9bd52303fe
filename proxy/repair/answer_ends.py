"""How an answer ends, and what the answer machine (answer.py) hands a door to render: the
machine decides each end, a door only renders it (server/doors/).

- `Clean`: the upstream ended its stream with `[DONE]`, or ran out after a finish reason (then
  the repairs' closing chunks follow). A whole body that is a chat completion.
- `UpstreamError`: the upstream's own error inside a 200 (Groq's `event: error`, OpenRouter's
  chunk with a top-level `error`, a whole body that is an error): nothing is invented after
  it, neither the repairs' closing chunks (a finish "stop" would turn the failure into a
  normal end) nor a `[DONE]`; calls still held back are not sent, the turn failed.
- `Truncated`: the stream broke off (the transport failed, an event outgrew its bound) or ran
  out before any finish reason and without `[DONE]`: a cut answer must not look complete.
- `NoEvents`: a 200 event stream without one event with data in it (empty, comments only, an
  HTML page, JSON labelled an event stream): "the model said nothing" would be invented.
- `NotAnAnswer`: a whole body that is not a chat completion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.repair.pipeline import Chunk


@dataclass(frozen=True, slots=True)
class Clean:
    """The upstream ended normally: with `[DONE]` (`done_seen`), or after a finish reason."""

    done_seen: bool = True


@dataclass(frozen=True, slots=True)
class UpstreamError:
    """The upstream reported an error inside its answer: its JSON object (or its event's
    text, as `{"message": …}`), and the event's bytes as received (empty for a whole body)."""

    body: Any
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class Aborted:
    """The answer did not end as an answer: the proxy's words for why."""

    message: str
    code: str = "stream_aborted"


@dataclass(frozen=True, slots=True)
class Truncated(Aborted):
    """Broke off, outgrew a bound, or ran out before it finished."""


@dataclass(frozen=True, slots=True)
class NoEvents(Aborted):
    """A 200 event stream with no event in it."""


@dataclass(frozen=True, slots=True)
class NotAnAnswer(Aborted):
    """A whole body that is not a chat completion."""


End = Clean | UpstreamError | Aborted
CLEAN = Clean()

NO_EVENT = "the upstream answered 200 with no event in its stream"
UNFINISHED = "the upstream's stream ended before its answer finished"
NOT_A_COMPLETION = "the upstream's answer is not a chat completion"
NO_ANSWER = "the upstream's event stream carried no answer"
NO_EVENTS = NoEvents(NO_EVENT, "upstream_no_events")


Piece = tuple[Chunk | None, bytes | None]
"""What a door renders for the upstream's events: a repaired chunk with, while no repair
changed it, the bytes it came as; or `(None, raw)`, an event that carries no chunk (a comment,
a typed event, data that is not a JSON object, everything after the upstream's own error),
which only a door that relays bytes sends on."""


@dataclass(frozen=True, slots=True)
class Whole:
    """An answer read whole: the completion (repaired), whether a repair changed it, the body
    as received, and how it ended. `as_received` is True when the body itself may go to a
    client that asked for JSON (a JSON body the proxy has nothing to say about), False for a
    stream folded into one answer."""

    completion: dict[str, Any] | None
    changed: bool
    raw: bytes
    end: End
    as_received: bool = True
