"""The front side of a Responses or Messages exchange, as `streamfix explain` shows it: the
client's own request and the chat request it became, the front events each repaired chat
event became, the terminal, and whether today's rendering is what the client was sent.

The chat side is explained as for any cassette (run.py). Then the repaired chat events, row by
row, go through the front's translator primed with what the recorded answer minted (the
replay's `Rendering`: fronts/rendering.py), so each row carries the front events it produced;
the start and the terminal belong to no chat event. The rows' front events, joined, are the
front's rendering of the whole chat answer, which is what `streamfix replay` compares with the
recorded client copy; explain compares the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.explain.attribution import Label
from proxy.explain.front_shapes import SHAPES, Shape, chat_shape
from proxy.fronts.rendering import chat_object, sse_data
from proxy.replay_check import diff_lines, front_of
from proxy.upstream.cassettes import Cassette
from proxy.upstream.client_requests import ClientRequest


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
    """Per chat row (run.py's rows, in order), the front events it became."""
    end: list[bytes] = field(default_factory=list)
    """After the last chat event: what closes the answer, and its terminal event."""
    answer: list[bytes] = field(default_factory=list)
    """A whole chat answer's front rendering: the body, or a streamed client's events."""
    counts: dict[str, int] = field(default_factory=dict)
    """What the front's events translation counted today."""
    diff: list[str] = field(default_factory=list)
    """Where the recorded client copy differs from today's rendering (heartbeats aside)."""
    accounted: bool = True
    """Whether the rows' front events add up to today's rendering of the whole answer."""
    rendered: bool = True
    """False when today's chat answer was relayed as received (an upstream error, a body
    that is not a completion): the front would not have rendered it."""

    @property
    def translation(self) -> dict[str, int]:
        """What the front's translation counted when the exchange was recorded."""
        return self.request.translation if self.request is not None else {}

    @property
    def translation_labels(self) -> list[Label]:
        """The translation's part, as a repair's is shown: recorded, not replayed (it read
        the proxy's store, which a cassette does not hold)."""
        return [Label("translation", self.translation, "recorded")] if self.translation else []

    @property
    def events_labels(self) -> list[Label]:
        """What the front's events translation counted today, over the whole answer."""
        return [Label("front events", self.counts, "")] if self.counts else []


def front_view(
    cassette: Cassette, mode: str, chat_rows: list[list[bytes]], chat_output: bytes
) -> FrontView | None:
    """The front side of `cassette`, or None for a chat client's. `chat_rows` are the chat
    events sent per row, `chat_output` today's whole chat answer; `mode` is explain's."""
    found = front_of(cassette)
    if found is None:
        return None
    front, rendering = found
    request = cassette.client_request
    view = FrontView(
        front.name,
        rendering.streamed,
        request,
        SHAPES[front.name](request.body_json) if request is not None else {},
        chat_shape(cassette.body_json),
    )
    if mode == "relayed":  # not a chat answer the front would render: nothing to compare
        view.rendered = False
        view.rows = [[] for _ in chat_rows]
        return view
    today = rendering.render(chat_output)
    view.diff = diff_lines(front.comparable(cassette.client_body), today)
    # A second renderer, driven row by row: the first one's state is spent.
    again = front_of(cassette)
    assert again is not None
    _, stepwise = again
    if mode == "stream" and stepwise.streamed:
        view.start = stepwise.start()
        view.rows = [
            [out for raw in sent for data in sse_data(raw) for out in stepwise.event(data)]
            for sent in chat_rows
        ]
        view.end = stepwise.end()
        joined = view.start + [out for row in view.rows for out in row] + view.end
        view.accounted = b"".join(joined) == today
    else:  # one body: the whole answer at once
        view.answer = _answer(stepwise.render(chat_output), stepwise.streamed)
        view.rows = [[] for _ in chat_rows]
    view.counts = dict(stepwise.translator.counts)
    return view


def _answer(rendered: bytes, streamed: bool) -> list[bytes]:
    """The rendering as shown: one body, or a streamed client's events one by one."""
    if not streamed:
        return [rendered]
    return [event + b"\n\n" for event in rendered.split(b"\n\n") if event]


def front_value(raw: bytes) -> Any:
    """A front event or body as shown: its JSON (an event's data names its type), else text."""
    text: str | None = raw.decode("utf-8", "replace")
    if raw.startswith((b"event:", b"data:")):
        data = [piece for piece in sse_data(raw) if piece is not None]
        text = data[0] if len(data) == 1 else None
    value = chat_object(text)
    return value if value is not None else raw.decode("utf-8", "replace").strip()
