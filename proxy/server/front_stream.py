"""A front's streamed answer: the upstream's chat SSE, decoded once, each chunk through the
repair chain and the chain's own chunk objects into the front's translator.

No chat bytes are encoded or decoded again between the repairs and the translation. The
chat pipeline's ends are kept: the upstream's own error in its stream ends the answer with the
front's error event (nothing is invented after it), a stream that broke off or outgrew a bound
ends it with one too, as does a body with no event in it (empty, an HTML page, a JSON body
labelled an event stream: "the model said nothing" would be invented), and only a clean end
(with or without `[DONE]`) gets the repairs' closing chunks and the front's clean terminal.
While the upstream is silent the front's heartbeat goes out every `heartbeat_seconds`
(quiet_pings.py; `[server] keepalive_seconds`).
Before the terminal event the answer's turn is kept (`keep`): the client fires its next
request the moment it arrives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

from proxy.fronts.translator import CLEAN, Aborted, Clean, End, Translator, UpstreamError
from proxy.repair.pipeline import RepairChain, chunks_until_error
from proxy.repair.tally import Tally
from proxy.server.quiet_pings import with_pings
from proxy.upstream.failures import describe_failure
from proxy.wire import json_codec
from proxy.wire.limits import LimitExceeded
from proxy.wire.sse import SSEDecoder, SSEEvent

Keep = Callable[[], Awaitable[None]]
NO_EVENT = "the upstream answered 200 with no event in its stream"


def aborted(exc: Exception) -> Aborted:
    """The proxy's words for a stream that broke off (no host or path: they may hold a key)."""
    if isinstance(exc, LimitExceeded):
        return Aborted(str(exc), exc.code)
    _, message, code = describe_failure(exc, None)
    return Aborted(message, code)


def _error_body(data: str | None) -> object:
    """An error event's data (Groq's `event: error`): its JSON when it is an object."""
    if data and data.startswith("{"):
        try:
            parsed = json_codec.loads(data)
        except json_codec.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"message": data or ""}


class _Feed:
    """Decoded SSE events -> repaired chunks -> the translator's events."""

    def __init__(self, chain: RepairChain, translator: Translator, tally: Tally) -> None:
        self._chain = chain
        self._translator = translator
        self._tally = tally
        self.heard = False
        """Whether any event with data came (a chunk, `[DONE]`, anything): an upstream body
        without one (empty, an HTML page, JSON) is not an answer, whatever its content type."""

    def events(self, events: list[SSEEvent]) -> tuple[list[bytes], End | None]:
        """The front's events for these, and the end when the upstream's own error came."""
        self.heard = self.heard or any(event.data is not None for event in events)
        chunks, error = chunks_until_error(events, self._chain, self._tally.count)
        out: list[bytes] = []
        feed = self._translator.feed
        for chunk in chunks:
            out += feed(chunk)
        if error is None:
            return out, None
        event, body = error
        return out, UpstreamError(body if body is not None else _error_body(event.data))

    async def closing(self) -> list[bytes]:
        out: list[bytes] = []
        for chunk, _ in await self._chain.on_end():
            out += self._translator.feed(chunk)
        return out


async def front_events(
    pieces: AsyncIterator[bytes],
    chain: RepairChain,
    translator: Translator,
    tally: Tally,
    max_event_bytes: int,
    heartbeat_seconds: float,
    keep: Keep,
) -> AsyncIterator[bytes]:
    """The front's event stream for the upstream body's decoded `pieces`."""
    sse = SSEDecoder(max_event_bytes)
    feed = _Feed(chain, translator, tally)
    # 0 turns heartbeats off ([server] keepalive_seconds, the one interval of every door).
    source: AsyncIterator[bytes | None] = (
        with_pings(pieces, heartbeat_seconds) if heartbeat_seconds > 0 else pieces
    )
    try:
        yield b"".join(translator.start())
        end: End | None = None
        try:
            async for data in source:
                if data is None:  # the upstream is silent
                    yield b"".join(translator.heartbeat())
                    continue
                out, end = feed.events(sse.feed(data))
                if out:
                    yield b"".join(out)
                if end is not None:
                    break
            if end is None:
                out, end = feed.events(sse.flush())
                if end is None and not feed.heard:
                    tally.note("stream_aborted", "the upstream's stream held no event")
                    end = Aborted(NO_EVENT, "upstream_no_events")
                if end is None:
                    out += await feed.closing()
                    end = CLEAN
                if out:
                    yield b"".join(out)
        except (httpx.HTTPError, LimitExceeded) as exc:
            tally.note("stream_aborted", "upstream stream failed: %s", type(exc).__name__)
            end = aborted(exc)
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()
            tally.count("events_split", sse.splits)
        settled = translator.settle(end)
        if settled:
            yield b"".join(settled)
        if isinstance(end, Clean):
            await keep()
        yield b"".join(translator.terminal())
    finally:
        for kind, amount in translator.counts.items():
            tally.count(kind, amount)
