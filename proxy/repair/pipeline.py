"""The stream phase: the contract every stream link implements, and the chain that runs one
exchange's links; the answer machine (answer.py) runs the chain over an answer.

Only JSON `data:` events reach the links. Comments, `event:`-typed events and data that is not a
JSON object pass around them. How an answer ends, and what may follow its end, is the answer
machine's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from proxy.repair.one_event import OneEvent
from proxy.wire import json_codec
from proxy.wire.limits import LimitExceeded
from proxy.wire.sse import SSEEvent

logger = logging.getLogger(__name__)

Chunk = dict[str, Any]
Count = Callable[[str, int], None]


def _uncounted(kind: str, amount: int) -> None:
    """The default `count`: a stream run without an exchange to book on."""


_UNTOUCHED = b"(a non-streamed answer's one event, untouched)"
"""The raw bytes the one-event trip hands the chain: back as they went, the event is unchanged."""


class Link:
    """One independent fix to the answer, built per exchange from the request phase's
    `Forwarded` (repairs/__init__.py `stream_links`), and only when it has something to do
    for this exchange. Override only the hooks you need."""

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        """The hot path: synchronous, no I/O. None means "untouched" (the original bytes go
        out); a list replaces the chunk (empty drops it, several split it)."""
        return None

    async def on_end(self) -> list[Chunk]:
        """The upstream stream ended cleanly: chunks to send before `[DONE]`."""
        return []

    def on_whole(self, body: dict[str, Any]) -> None:
        """A non-streamed answer, as the client gets it after its one-event trip: for a link
        that reads the answer, where the trip's own assumptions (a null finish read as
        "stop") are gone again."""

    stream_framing = False
    """True for a link whose only job is how an answer is cut into events (which delta
    carries the role): a non-streamed answer has no events, so its one-event trip skips it."""


class RepairChain:
    """The stream phase: one exchange's links in order, run over each event of the answer."""

    def __init__(self, links: Sequence[Link], *, strict: bool = False) -> None:
        self.links = list(links)
        self.strict = strict
        # Per chunk and at the end, only the links with a hook of their own run.
        self._chunk_links = [
            (position, link)
            for position, link in enumerate(self.links)
            if type(link).on_chunk is not Link.on_chunk
        ]
        self._end_links = [
            (position, link)
            for position, link in enumerate(self.links)
            if type(link).on_end is not Link.on_end
        ]

    async def on_response(self, body: dict[str, Any]) -> bool:
        """Repair a non-streamed completion in place, through the stream links: as a one-event
        stream (one_event.py), run as a stream is, folded back. False, and the body untouched,
        when the links changed nothing: the client then gets the bytes the upstream sent."""
        trip = OneEvent(body)
        streaming = self._chunk_links
        self._chunk_links = [(p, link) for p, link in streaming if not link.stream_framing]
        try:
            items = self.on_chunk(trip.chunk, _UNTOUCHED)
            items += await self.on_end(framing=False)
        finally:
            self._chunk_links = streaming
        if len(items) == 1 and items[0][1] is _UNTOUCHED:
            self._whole(body)
            return False
        folded = trip.fold(chunk for chunk, _ in items)
        if folded == body:  # a link rebuilt what it was given, the same (a message's calls)
            self._whole(body)
            return False
        body.clear()
        body.update(folded)
        self._whole(body)
        return True

    def _whole(self, body: dict[str, Any]) -> None:
        for link in self.links:
            if type(link).on_whole is not Link.on_whole:
                link.on_whole(body)

    def on_chunk(
        self, chunk: Chunk, raw: bytes | None, start: int = 0
    ) -> list[tuple[Chunk, bytes | None]]:
        """Run `chunk` through links[start:]; pairs keep the raw bytes while nothing changed."""
        # The hot loop: most chunks pass every link untouched, so no lists are built for them,
        # and the guard is inlined rather than one more call per link per chunk.
        for position, link in self._chunk_links:
            if position < start:
                continue
            try:
                result = link.on_chunk(chunk)
            except LimitExceeded:
                raise  # the upstream outgrew a bound: the stream ends, no repair's bug
            except Exception:
                self._absorb(link)
                continue
            if result is not None:
                items: list[tuple[Chunk, bytes | None]] = []
                for out in result:
                    items.extend(self.on_chunk(out, None, position + 1))
                return items
        return [(chunk, raw)]

    async def on_end(self, *, framing: bool = True) -> list[tuple[Chunk, bytes | None]]:
        """Each link's closing chunks still flow through the links after it. `framing` False:
        the links that only frame a stream are left out (a non-streamed answer's trip)."""
        out: list[tuple[Chunk, bytes | None]] = []
        for position, link in self._end_links:
            if link.stream_framing and not framing:
                continue
            try:
                closing = await link.on_end()
            except Exception:
                self._absorb(link)
                continue
            for chunk in closing:
                out.extend(self.on_chunk(chunk, None, position + 1))
        return out

    # A link that raises must not take the stream down: its input passes on unrepaired, and
    # the failure is logged with the link's name. Strict mode (the tests) re-raises instead.

    def _absorb(self, link: Link) -> None:
        """Called while a link's exception is being handled."""
        if self.strict:
            raise  # re-raises the exception being handled
        logger.exception("repair %s failed; passing data unrepaired", type(link).__name__)


def as_chunk(event: SSEEvent) -> Chunk | None:
    """The JSON object an event carries, or None when the event must pass through as bytes."""
    if event.data is None or event.event not in (None, "message"):
        return None
    data = event.data
    if not data.startswith("{"):
        return None
    try:
        chunk = json_codec.loads(data)
    except json_codec.JSONDecodeError:
        return None
    return chunk if isinstance(chunk, dict) else None


def is_done(event: SSEEvent) -> bool:
    return event.data is not None and event.data.strip() == "[DONE]"


def is_upstream_error(event: SSEEvent, chunk: Chunk | None) -> bool:
    """An error the upstream reports inside its stream. The OpenAI SDK raises `APIError` on
    any data whose `error` is set, whatever the event name; the AI SDK ends with an error."""
    if chunk is not None:
        return bool(chunk.get("error"))
    return event.event == "error"
