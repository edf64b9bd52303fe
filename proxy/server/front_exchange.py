"""One runner for every front (the Responses and Messages doors): the chat exchange of
`Proxy.chat_completions`, with a translation on each side.

admission -> parse -> route -> the front's translation (run again, on a fresh tally, when a
learned refusal calls for a rebuild) -> recall -> record -> phase one -> send, learn, rebuild
-> phase two -> one of:

- a refusal before the first byte: the upstream's status with the front's own error body,
  never a stream (Codex retries a mid-stream failure five times: a deterministic 400 must not
  become six requests);
- a stream: the repaired chunks into the front's translator (front_stream.py), its heartbeat
  while the upstream is silent, the turn kept before the terminal event;
- a whole body: repaired through `chain.on_response`, rendered by the front, its turn kept.

Every path is booked once (log line, metrics, span) with `x-streamfix-repairs`; a repaired
answer ends with what it taught (`Exchanges.answered`). A recording's client copy gets what the
client was sent (the front's events or body) and the client's own request. A front supplies a
`Door` (responses_endpoint.py, messages.py; doors.py says what one supplies); nothing here
knows either protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Generic

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.fronts.translator import Refused
from proxy.fronts.turns import TurnStore
from proxy.repair.phases import Phases
from proxy.repair.pipeline import RepairChain, chunks_until_error
from proxy.repair.rules import RouteRules
from proxy.repair.stream_fold import folded_completion
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.routing.routes import CHAT_PATH, Router
from proxy.server.delivery import SSE_HEADERS, ClosingBody, raw_body, repairs_header
from proxy.server.doors import Arrival, Door, F, T
from proxy.server.exchanges import Exchanges, Rebuilt, headed, plain_record, request_id_of
from proxy.server.front_stream import front_events
from proxy.server.record import ExchangeRecord
from proxy.server.streamed_response import StreamedResponse
from proxy.store.protocol import Store as ReceiptStore
from proxy.upstream.body_decoding import Decoder, decoded, decoder_for, read_limited
from proxy.wire import json_codec
from proxy.wire.limits import LimitExceeded
from proxy.wire.sse import SSEDecoder

ERROR_BODY_BYTES = 65_536
"""How much of an upstream's refusal is read for its message."""


@dataclass(frozen=True, slots=True)
class FrontRunner:
    """Runs a door's exchanges on the app's router, phases, store, learning and bookkeeping."""

    router: Router
    phases: Phases
    store: ReceiptStore
    exchanges: Exchanges

    async def run(self, door: Door[F, T], request: Request) -> Response:
        exchanges = self.exchanges
        request_id = request_id_of(request)
        raw = await exchanges.admitted_body(request, request_id)
        if isinstance(raw, Response):
            return door.restyled(raw)
        client_headers = request.headers
        headers = door.chat_headers(request.scope["headers"])
        if headers is not request.scope["headers"]:
            request = Request(dict(request.scope, headers=headers), request.receive)
        try:
            body = json_codec.loads(raw)
        except json_codec.JSONDecodeError as exc:
            message = f"request body is not valid JSON: {exc}"
            return self._refused(request, request_id, door.error(400, message, "invalid_json"))
        if not isinstance(body, dict):
            message = "request body must be a JSON object"
            return self._refused(request, request_id, door.error(400, message, "invalid_request"))
        route = self.router.route_for(body.get("model"))
        scope = ReceiptScope(exchanges.tenant(request), route.identity)
        arrival = Arrival(request, client_headers, route, TurnStore(self.store, scope))
        try:
            front = await self._translated(door, body, arrival)
        except Refused as exc:
            refusal = Response(
                json_codec.dumps(exc.body), status_code=exc.status, media_type="application/json"
            )
            return self._refused(request, request_id, refusal, body.get("model"))
        chat = front.chat
        started = time.monotonic()  # the clock the app's bookkeeping reads
        rules = route.rules(chat.get("model"))
        recalled = await exchanges.refusals.recall(route.identity, chat, rules)
        record = exchanges.record(request, request_id, chat, route, started)
        _count(record.tally, front.counts)
        # Phase one: the request repairs on the chat request the front's request became.
        forwarded, _ = await self.phases.request(chat, recalled.applied(rules), scope, record.tally)
        record.forwarded = forwarded

        async def rebuild(rules: RouteRules) -> Rebuilt:
            """Phase one again from the client's request, with the rules a refusal called for
            (upstream/refusals.py), as the chat door does: a fresh tally, the translation's
            counts on it. A translation that now refuses (its stored transcript gone) leaves
            the refusal standing."""
            assert record.forwarded is not None
            try:
                again = await self._translated(door, body, arrival)
            except Refused:  # unchanged: the upstream's refusal stands
                return Rebuilt(record.forwarded, record.tally)
            tally = Tally(request_id)
            _count(tally, again.counts)
            forwarded, _ = await self.phases.request(again.chat, rules, scope, tally)

            def adopt() -> None:
                nonlocal front
                front = again

            return Rebuilt(forwarded, tally, adopt)

        content = json_codec.dumps(forwarded.body)
        upstream = await exchanges.send(
            request, route, CHAT_PATH, content, record, resend=forwarded.body, rebuild=rebuild
        )
        if isinstance(upstream, Response):
            return exchanges.failed(record, door.restyled(upstream))
        if record.client_copy is not None:
            # A recording keeps the client's own request beside the chat request it became,
            # with what the last translation (after a refusal's rebuild) counted.
            record.client_copy.client_request(
                request.method,
                request.url.path,
                request.url.query,
                client_headers,
                raw,
                front.counts,
            )
        status = upstream.status_code
        decoder = decoder_for(upstream.headers.get("content-encoding", ""))
        if status >= 400 or decoder is None:
            return await self._refusal(door, record, upstream, decoder)
        assert record.forwarded is not None  # set by phase one, or by a refusal's rebuild
        # Phase two: the stream links, built from what phase one decided.
        chain = self.phases.stream(record.forwarded, record.tally)
        exchange = _Exchange(self, door, front, arrival, record, status)
        translator = door.translator(front, body, arrival)
        if "text/event-stream" not in upstream.headers.get("content-type", ""):
            return await exchange.whole(upstream, decoder, chain, translator)
        if front.stream:
            return exchange.streamed(upstream, decoder, chain, translator)
        # Asked for one answer, streamed anyway: the repaired stream, folded into it.
        return await exchange.folded(upstream, decoder, chain, translator)

    async def _translated(self, door: Door[F, T], body: dict[str, Any], arrival: Arrival) -> F:
        front = await door.translate(body, arrival)
        upstream_model = arrival.route.upstream.model
        if upstream_model:
            front.chat["model"] = upstream_model
        return front

    def _refused(
        self, request: Request, request_id: str, answer: Response, model: object = None
    ) -> Response:
        """Refused before anything went upstream: logged and counted like the chat refusals."""
        return self.exchanges.failed(plain_record(request, request_id, "-", model), answer)

    async def _refusal(
        self,
        door: Door[F, T],
        record: ExchangeRecord,
        upstream: httpx.Response,
        decoder: Decoder | None,
    ) -> Response:
        """The upstream refused before its first byte: its status, the front's error body."""
        try:
            pieces = raw_body(upstream)
            if decoder is not None:
                pieces = decoded(pieces, decoder)
            said = await read_limited(pieces, ERROR_BODY_BYTES, None)
        except (httpx.HTTPError, LimitExceeded):
            said = b""
        finally:
            await upstream.aclose()
        if decoder is None:
            message = "the upstream's Content-Encoding cannot be decoded by the proxy"
            answer = door.error(502, message, "upstream_error")
        else:
            answer = door.upstream_refusal(upstream.status_code, said)
        if record.client_copy is not None:  # recorded like a chat refusal, for --replay
            record.client_copy.sent(bytes(answer.body))
            await record.client_copy.save()
        return self.exchanges.failed(record, answer)


@dataclass(frozen=True, slots=True)
class _Exchange(Generic[F, T]):
    """One front exchange after its send: the answer's delivery."""

    runner: FrontRunner
    door: Door[F, T]
    front: F
    arrival: Arrival
    record: ExchangeRecord
    status: int

    def streamed(
        self, upstream: httpx.Response, decoder: Decoder, chain: RepairChain, translator: T
    ) -> Response:
        runner, record = self.runner, self.record
        runner.exchanges.metrics.active_streams.inc()

        def closed() -> None:
            runner.exchanges.metrics.active_streams.dec()
            runner.exchanges.answered(record, self.arrival.route, self.status)

        async def keep() -> None:
            await self.keep(translator)

        events = front_events(
            decoded(raw_body(upstream), decoder),
            chain,
            translator,
            record.tally,
            runner.exchanges.settings.server.max_event_bytes,
            runner.exchanges.settings.server.keepalive_seconds,
            keep,
        )
        headers = [
            *SSE_HEADERS,
            (b"x-request-id", record.request_id.encode("latin-1")),
            repairs_header(record.tally),
        ]
        return StreamedResponse(
            ClosingBody(upstream, events, record, closed),
            status_code=200,
            headers=headers,
            media_type="text/event-stream",
        )

    async def whole(
        self, upstream: httpx.Response, decoder: Decoder, chain: RepairChain, translator: T
    ) -> Response:
        runner, door, record = self.runner, self.door, self.record
        limit = runner.exchanges.settings.server.max_response_bytes
        try:
            pieces = decoded(raw_body(upstream), decoder)
            said = await read_limited(pieces, limit, upstream.headers.get("content-length"))
            completion = json_codec.loads(said)
        except (httpx.HTTPError, LimitExceeded, json_codec.JSONDecodeError) as exc:
            message = f"the upstream answer could not be read: {type(exc).__name__}"
            return runner.exchanges.failed(record, door.error(502, message, "upstream_error"))
        finally:
            await upstream.aclose()
        if (
            isinstance(completion, dict)
            and completion.get("error")
            and not completion.get("choices")
        ):
            # An error in a 200 body: the client gets it as an error, not as an empty answer.
            return runner.exchanges.failed(record, door.upstream_refusal(502, said))
        if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
            message = "the upstream's answer is not a chat completion"
            return runner.exchanges.failed(record, door.error(502, message, "upstream_error"))
        await chain.on_response(completion)
        return await self._answered(completion, translator)

    async def folded(
        self, upstream: httpx.Response, decoder: Decoder, chain: RepairChain, translator: T
    ) -> Response:
        """A streamed answer to a client that asked for one whole: read (bounded like a whole
        body), repaired event by event as any stream is, and folded into the completion the
        repaired chunks say (repair/stream_fold.py). The upstream's own error event, or a
        stream that said nothing, is the front's error."""
        runner, door, record = self.runner, self.door, self.record
        settings = runner.exchanges.settings.server
        try:
            pieces = decoded(raw_body(upstream), decoder)
            said = await read_limited(pieces, settings.max_response_bytes, None)
            sse = SSEDecoder(settings.max_event_bytes)
            events = [*sse.feed(said), *sse.flush()]
            repaired, error = chunks_until_error(events, chain, record.tally.count)
            if error is not None:
                said = (error[0].data or "").encode()
                return runner.exchanges.failed(record, door.upstream_refusal(502, said))
            repaired += [out for out, _ in await chain.on_end()]
        except (httpx.HTTPError, LimitExceeded) as exc:
            message = f"the upstream answer could not be read: {type(exc).__name__}"
            return runner.exchanges.failed(record, door.error(502, message, "upstream_error"))
        finally:
            await upstream.aclose()
        completion = folded_completion(repaired)
        if completion is None:
            message = "the upstream's event stream carried no answer"
            return runner.exchanges.failed(record, door.error(502, message, "upstream_no_events"))
        record.tally.count("stream_folded", 1)
        return await self._answered(completion, translator)

    async def _answered(self, completion: dict[str, Any], translator: T) -> Response:
        """A repaired whole completion, as the front's one answer."""
        runner, door, record = self.runner, self.door, self.record
        body, media_type = door.whole_body(self.front, translator, completion)
        await self.keep(translator)
        runner.exchanges.answered(record, self.arrival.route, self.status)
        if record.client_copy is not None:  # a recording keeps what the client was sent
            record.client_copy.sent(body)
            await record.client_copy.save()
        return headed(Response(body, status_code=200, media_type=media_type), record)

    async def keep(self, translator: T) -> None:
        """The answer's turn and the front's records, before the client can ask for them. A
        failed write is counted; the answer still goes out."""
        turns = self.arrival.turns
        if not turns.usable:
            return
        turn = translator.turn()
        assert self.record.forwarded is not None
        forwarded = self.record.forwarded.body
        extra = self.door.records(self.front, forwarded, translator, turn)
        if turn is None and not extra:
            return
        if not await turns.keep(translator.answer_id, turn, extra):
            kind = self.door.store_failed_kind
            self.record.note(kind, "answer %s not stored", translator.answer_id)


def _count(tally: Tally, counts: dict[str, int]) -> None:
    """What the translation did, on the exchange's tally beside the repairs."""
    for kind, amount in counts.items():
        tally.count(kind, amount)
