"""The front side of a Responses or Messages exchange, as `streamfix explain` shows it: the
client's own request and the chat request it became, the front events each chat event became,
the terminal, and whether today's answer is what the client was sent.

The exchange is replayed as it was served: the client's own request through its front's door
(run.py), so the translation, the answer machine and the door's rendering are the server's.
The rendering was watched event by event (answer_record.py), so each chat row carries the
front events the door rendered for it; the start and the terminal belong to no chat event.
Today's answer is compared with the recorded client copy as `streamfix replay` compares them
(replay_check.py: heartbeats aside, what each answer mints taken as recorded), and shown with
the recorded answer's ids. A cassette recorded before the client's request was kept cannot go
through its door: only its chat side is explained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from proxy.explain.answer_record import AnswerRecord
from proxy.explain.attribution import Label
from proxy.explain.front_shapes import SHAPES, Shape, chat_shape
from proxy.explain.rows import Row
from proxy.replay_check import Front, diff_lines
from proxy.upstream.cassettes import Cassette
from proxy.upstream.client_requests import ClientRequest
from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder

_RECORDED = "recorded, from the proxy's store, which a cassette does not hold"


@dataclass
class FrontView:
    api: str
    """The front's name: `Responses` or `Messages`."""
    streamed: bool
    """Whether the client was sent events (else one body)."""
    request: ClientRequest | None
    """The client's own request; None in a cassette recorded before it was kept."""
    front_shape: Shape
    chat_shape: Shape
    """What the chat request that went upstream holds."""
    start: list[bytes] = field(default_factory=list)
    """Events sent before any chat event: the answer's opening."""
    rows: list[list[bytes]] = field(default_factory=list)
    """Per chat row (rows.py's rows, in order), the front events it became."""
    end: list[bytes] = field(default_factory=list)
    """After the last chat event: what closes the answer, and its terminal event."""
    answer: list[bytes] = field(default_factory=list)
    """An answer sent whole: the body, or a streamed client's events."""
    counts: dict[str, int] = field(default_factory=dict)
    """What the door's rendering counted today."""
    translated: dict[str, int] = field(default_factory=dict)
    """What the door's translation counted today."""
    diff: list[str] = field(default_factory=list)
    """Where the recorded client copy differs from today's answer (heartbeats aside)."""
    accounted: bool = True
    """Whether the rows' front events add up to today's answer."""
    rendered: bool = True
    """False when the exchange could not go through the front's door (a cassette recorded
    before the client's request was kept)."""

    @property
    def translation(self) -> dict[str, int]:
        """What the front's translation counted when the exchange was recorded."""
        return self.request.translation if self.request is not None else {}

    @property
    def translation_labels(self) -> list[Label]:
        """The translation's part today, as a repair's is shown."""
        if not self.translated:
            return []
        same = self.translated == self.translation
        return [Label("translation", self.translated, "as recorded" if same else "replayed")]

    @property
    def recorded_labels(self) -> list[Label]:
        """What the translation counted when recorded, where today's differs: it read the
        proxy's store, which a cassette does not hold."""
        if not self.translation or self.translation == self.translated:
            return []
        return [Label("translation", self.translation, _RECORDED)]

    @property
    def events_labels(self) -> list[Label]:
        """What the door's rendering counted today, over the whole answer."""
        return [Label("front events", self.counts, "")] if self.counts else []


def front_view(
    cassette: Cassette,
    front: Front,
    rows: list[Row],
    record: AnswerRecord | None,
    response: httpx.Response | None,
) -> FrontView:
    """The front side of `cassette`: `response` is the door's answer today (None when it could
    not be replayed through the door), `record` its answer's record (None when no answer went
    through the machine), `rows` explain's chat rows."""
    request = cassette.client_request
    view = FrontView(
        front.title,
        cassette.client_body.startswith(b"event:"),
        request,
        SHAPES[front.title](request.body_json) if request is not None else {},
        chat_shape(cassette.body_json),
        rows=[[] for _ in rows],
    )
    if response is None:
        view.rendered = False
        return view
    today = response.content
    view.streamed = response.headers.get("content-type", "").startswith("text/event-stream")
    view.diff = diff_lines(*front.comparable(cassette.client_body, today))
    as_recorded = front.as_recorded(cassette.client_body, today)
    if record is None or record.mode != "stream":
        view.answer = _events(as_recorded(today)) if view.streamed else [as_recorded(today)]
    else:
        view.start = _events(as_recorded(record.start))
        view.rows = [_events(as_recorded(row.door)) for row in rows]
        closing = record.end_bytes + record.terminal
        view.end = _events(as_recorded(closing))
        joined = record.start + b"".join(row.door for row in rows) + closing
        view.accounted = record.in_step and joined == today
    if record is not None:
        view.counts = dict(record.counts)
    return view


def _events(rendered: bytes) -> list[bytes]:
    """A front's events one by one."""
    return [event + b"\n\n" for event in rendered.split(b"\n\n") if event]


def front_value(raw: bytes) -> Any:
    """A front event or body as shown: its JSON (an event's data names its type), else text."""
    text: str | None = raw.decode("utf-8", "replace")
    if raw.startswith((b"event:", b"data:")):
        decoder = SSEDecoder(len(raw) + 1)
        data = [event.data for event in [*decoder.feed(raw), *decoder.flush()] if event.data]
        text = data[0] if len(data) == 1 else None
    value = _object(text)
    return value if value is not None else raw.decode("utf-8", "replace").strip()


def _object(text: str | None) -> dict[str, Any] | None:
    if not text or not text.startswith("{"):
        return None
    try:
        value = json_codec.loads(text)
    except json_codec.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
