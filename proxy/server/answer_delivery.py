"""One exchange's answer after its send, delivered as the upstream's head calls for
(delivery_mode.py): a refusal, a relay, a stream, or one whole answer. The answer machine
(repair/answer.py) reads every answer that is repaired; the door renders it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic

import httpx
from starlette.responses import Response

from proxy.learning.refusal_reading import read_refusal
from proxy.repair.answer import AnswerMachine
from proxy.repair.answer_ends import Clean
from proxy.repair.error_shape import KIND as ERROR_SHAPE_KIND
from proxy.repair.error_shape import unwrapped_error
from proxy.repair.phases import Phases
from proxy.server.answer_stream import FAILURES, answer_events
from proxy.server.delivery import ClosingBody, raw_body, relay, repairs_header
from proxy.server.doors.door import Arrival, Door, F, R
from proxy.server.exchanges import Exchanges
from proxy.server.keepalive import Keepalive
from proxy.server.record import ExchangeRecord
from proxy.server.streamed_response import StreamedResponse
from proxy.upstream.body_decoding import decoded, decoder_for, read_limited
from proxy.upstream.failures import describe_failure, upstream_origin
from proxy.wire.limits import LimitExceeded

ERROR_BODY_BYTES = 65_536
"""How much of an upstream's refusal a door that renders it reads for its message."""
WHEN_TO_COME_BACK = ("retry-after", "retry-after-ms")
"""What a refusal in the door's own shape keeps of the upstream's head: when to ask again
(a 429's, a 503's), which the SDKs and Claude Code wait for before their own retry."""


@dataclass(slots=True)
class Answer(Generic[F, R]):
    """One exchange's answer: its door, its request as translated, and the upstream's head;
    phase two is built from the exchange's phases (`Phases.answer`)."""

    exchanges: Exchanges
    phases: Phases
    door: Door[F, R]
    front: F
    arrival: Arrival
    record: ExchangeRecord
    upstream: httpx.Response

    # ── not repaired ───────────────────────────────────────────────────────

    def relayed(self) -> Response:
        """The upstream's bytes as they came, undecoded (their `Content-Encoding` with them):
        a chat client's refusal, or a streamed request answered with something else."""
        exchanges, record, upstream = self.exchanges, self.record, self.upstream
        status = upstream.status_code
        headers = exchanges.client_headers(upstream, record.request_id, decoded=False)
        return relay(upstream, record, headers, lambda: exchanges.finished(record, status))

    async def refused(self, unrepaired_encoding: str | None) -> Response:
        """The upstream refused before its first byte, or answered in an encoding the proxy
        does not decode: relayed where the door relays refusals, else the upstream's status
        and words in the door's error shape."""
        record, upstream, door = self.record, self.upstream, self.door
        if door.relays_refusals:
            if unrepaired_encoding is not None:
                record.note(
                    "unrepaired_encoding",
                    "relayed unrepaired: the proxy does not decode Content-Encoding %r",
                    unrepaired_encoding,
                )
                return self.relayed()
            return await self._relayed_refusal()
        decoder = decoder_for(upstream.headers.get("content-encoding", ""))
        try:
            pieces = raw_body(upstream)
            if decoder is not None:
                pieces = decoded(pieces, decoder)
            said = await read_limited(pieces, ERROR_BODY_BYTES, None)
        except FAILURES:
            said = b""
        finally:
            await upstream.aclose()
        if decoder is None:
            message = "the upstream's Content-Encoding cannot be decoded by the proxy"
            answer = door.error(502, message, "upstream_error")
        else:
            answer = door.upstream_refusal(upstream.status_code, said)
            for name in WHEN_TO_COME_BACK:  # the client's own retry waits as long as asked
                value = upstream.headers.get(name)
                if value is not None:
                    answer.headers[name] = value
        if record.client_copy is not None:  # recorded like a chat refusal, for --replay
            record.client_copy.sent(bytes(answer.body))
            await record.client_copy.save()
        return self.exchanges.failed(record, answer)

    async def _relayed_refusal(self) -> Response:
        """A refusal for a client that speaks the upstream's protocol: as the upstream sent
        it, unless its body is an error object wrapped in an array (repair/error_shape.py).
        The body is looked at within the refusal reader's bound; a longer one, or one that
        does not decode, is relayed as it comes."""
        exchanges, record = self.exchanges, self.record
        upstream, text = await read_refusal(self.upstream)  # every byte still there
        unwrapped = unwrapped_error(text.encode()) if text is not None else None
        if unwrapped is not None:
            await upstream.aclose()
            record.tally.count(ERROR_SHAPE_KIND, 1)
            headers = exchanges.client_headers(upstream, record.request_id, decoded=True)
            response = Response(unwrapped, status_code=upstream.status_code)
            response.raw_headers.extend(headers)
            return exchanges.failed(record, response)
        status = upstream.status_code
        headers = exchanges.client_headers(upstream, record.request_id, decoded=False)
        return relay(upstream, record, headers, lambda: exchanges.finished(record, status))

    # ── repaired ───────────────────────────────────────────────────────────

    def streamed(self, encoding: str, rendering: R) -> Response:
        exchanges, record, upstream = self.exchanges, self.record, self.upstream
        server = exchanges.settings.server
        decoder = decoder_for(encoding)
        assert decoder is not None  # delivery_mode refuses what has none
        machine = self._machine()
        watched = machine.watched(rendering)
        interval = server.keepalive_seconds  # 0 turns heartbeats off, on every door
        beat = Keepalive(interval, watched.heartbeat) if interval > 0 else None
        status, headers = self.door.stream_head(upstream, record)
        exchanges.metrics.active_streams.inc()

        def closed() -> None:
            exchanges.metrics.active_streams.dec()
            exchanges.answered(record, self.arrival.route, status)

        async def keep() -> None:
            await self.keep(rendering)

        events = answer_events(
            decoded(raw_body(upstream), decoder),
            machine,
            watched,
            self._words,
            keep,
            beat.end if beat is not None else _nothing,
        )
        return StreamedResponse(
            ClosingBody(upstream, events, record, closed),
            status_code=status,
            headers=headers,
            media_type="text/event-stream",
            keepalive=beat,
        )

    async def whole(self, encoding: str, rendering: R, *, folded: bool) -> Response:
        """A whole body, or a stream answering a request that asked for one (`folded`): read
        (bounded), through the machine, as the door's one answer."""
        exchanges, record, upstream, door = self.exchanges, self.record, self.upstream, self.door
        server = exchanges.settings.server
        decoder = decoder_for(encoding)
        assert decoder is not None  # delivery_mode refuses what has none
        machine = self._machine()
        length = None if folded else upstream.headers.get("content-length")
        try:
            pieces = decoded(raw_body(upstream), decoder)
            said = await read_limited(pieces, server.max_response_bytes, length)
            whole = await (machine.folded(said) if folded else machine.whole(said))
        except FAILURES as exc:
            status, message, code = self._failure(exc)
            return exchanges.failed(record, door.error(status, message, code))
        finally:
            await upstream.aclose()
        # The door's body first (a front's translator reads the answer as it renders it), the
        # turn kept, the exchange booked (with what the answer taught), then the repairs header.
        response = door.whole_answer(self.front, rendering, whole, upstream, record)
        for kind, amount in rendering.counts.items():  # what the rendering did, as a stream's
            record.tally.count(kind, amount)  # (none, for most)
        if isinstance(whole.end, Clean):
            await self.keep(rendering)
            exchanges.answered(record, self.arrival.route, upstream.status_code)
        else:
            exchanges.finished(record, response.status_code)
        response.raw_headers.append(repairs_header(record.tally))
        if record.client_copy is not None:
            # After the bookkeeping: a cancellation may land in the save's wait for the disk.
            record.client_copy.sent(bytes(response.body))
            await record.client_copy.save()
        return response

    async def keep(self, rendering: R) -> None:
        """The answer's turn and the door's records, before the client can ask for them. A
        failed write is counted; the answer still goes out."""
        if not self.door.keeps_turns:
            return
        turns = self.arrival.turns
        if not turns.usable:
            return
        turn = rendering.turn()
        assert self.record.forwarded is not None
        forwarded = self.record.forwarded.body
        extra = self.door.records(self.front, forwarded, rendering, turn)
        if turn is None and not extra:
            return
        if not await turns.keep(rendering.answer_id, turn, extra):
            kind = self.door.store_failed_kind
            self.record.note(kind, "answer %s not stored", rendering.answer_id)

    def _machine(self) -> AnswerMachine:
        """Phase two: the stream links, built from what phase one decided, in the machine."""
        record = self.record
        assert record.forwarded is not None  # set by phase one, or by a refusal's rebuild
        max_event_bytes = self.exchanges.settings.server.max_event_bytes
        return self.phases.answer(record.forwarded, record.tally, max_event_bytes)

    def _failure(self, exc: Exception) -> tuple[int, str, str]:
        """The status, words and code for what broke a read off (no path or query: they may
        hold a key)."""
        if isinstance(exc, LimitExceeded):
            return 502, str(exc), exc.code
        return describe_failure(exc, _origin(self.upstream))

    def _words(self, exc: Exception) -> tuple[str, str]:
        _, message, code = self._failure(exc)
        return message, code


def _nothing() -> None:
    """No keepalive to tell."""


def _origin(upstream: httpx.Response) -> str | None:
    """`host:port` the response came from, for an error message; None when it has no request
    (then describe_failure asks the exception's own)."""
    try:
        return upstream_origin(upstream.request.url)
    except RuntimeError:  # httpx: no request was set on the response
        return None
