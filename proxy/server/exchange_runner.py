"""The one exchange runner: every door (chat completions, Responses, Messages) runs its
exchanges here, the chat door with an identity translation.

admission -> the door's parse -> route -> the door's translation (again, on a fresh tally,
when a learned refusal calls for a rebuild) -> recall -> record -> phase one -> send, learn,
rebuild -> phase two, delivered as the upstream's answer calls for (answer_delivery.py):

- a refusal before the first byte (an error status, an encoding the proxy cannot decode):
  relayed to a chat client as the upstream sent it, in a front's own error shape to a front's
  client, never a stream (Codex retries a mid-stream failure five times: a deterministic 400
  must not become six requests);
- a stream: through the answer machine (repair/answer.py) into the door's rendering, with the
  door's heartbeat in the client's silences, the turn kept before the terminal event;
- a whole body, or a stream answering a request that asked for one (folded into it): through
  the same machine, as the door's one answer;
- a refusal of a content part nothing stands in for (a PDF to a model that reads none,
  learning/refused_parts.py): the door's own 400 naming it (a chat client gets the upstream's
  as sent); once learned, a request carrying one is answered so before anything goes up.

Every path is booked once (log line, metrics, span) with `x-streamfix-repairs`; a repaired
answer ends with what it taught (`Exchanges.answered`). A recording's client copy gets what the
client was sent and, for a front, the client's own request. The door supplies everything that
is its protocol's (server/doors/); nothing here knows a protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.fronts.translator import Refused
from proxy.learning.refusal_reading import read_refusal
from proxy.repair.phases import Phases
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.routing.routes import CHAT_PATH, Router
from proxy.server.answer_delivery import Answer
from proxy.server.chat_request import model_of
from proxy.server.delivery_mode import Mode, delivery_mode
from proxy.server.doors.door import Arrival, Door, F, R
from proxy.server.exchanges import Exchanges, Rebuilt, new_request_id, plain_record
from proxy.server.record import ExchangeRecord
from proxy.store.protocol import Store
from proxy.wire import json_codec
from proxy.wire.error_bodies import read_error


@dataclass(frozen=True, slots=True)
class ExchangeRunner:
    """Runs a door's exchanges on the app's router, phases, store, learning and bookkeeping."""

    router: Router
    phases: Phases
    store: Store
    exchanges: Exchanges

    async def run(self, door: Door[F, R], request: Request) -> Response:
        exchanges = self.exchanges
        request_id = request.headers.get("x-request-id") or new_request_id()
        raw = await exchanges.admitted_body(request, request_id)
        if isinstance(raw, Response):
            return door.restyled(raw)
        client_headers = request.headers
        headers = door.chat_headers(request.scope["headers"])
        if headers is not request.scope["headers"]:
            request = Request(dict(request.scope, headers=headers), request.receive)
        try:
            body = door.parse(raw)
        except Refused as exc:
            return self._refused(request, request_id, exc, model_of(raw))
        route = self.router.route_for(body.get("model"))
        # The client's own bytes go up when nothing changed them: a chat client's request
        # that no route renames and no repair touches.
        renamed = bool(route.upstream.model) and body.get("model") != route.upstream.model
        untouched = raw if door.sends_client_bytes and not renamed else None
        scope = ReceiptScope(exchanges.tenant(request), route.identity)
        arrival = Arrival(request, client_headers, route, self.store, scope)
        try:
            front = await self._translated(door, body, arrival)
        except Refused as exc:
            return self._refused(request, request_id, exc, body.get("model"))
        chat = front.chat
        started = time.monotonic()  # the recall below is part of the exchange's time
        rules = route.rules(chat.get("model"))
        estimates = door.estimates_tokens
        recalled = await exchanges.refusals.recall(route.identity, chat, rules, tokens=estimates)
        record = exchanges.record(request, request_id, chat, route, started, door.name)
        record.tokens, record.learns_tokens = recalled.tokens, estimates
        if front.counts:
            _count(record.tally, front.counts)
        refused = recalled.refused_part
        if refused is not None:  # refused for this model before: nothing goes up
            record.tally.count(refused.refused_kind, 1)
            refusal = door.part_refused(front, refused, chat.get("model"), None)
            return exchanges.failed(record, refusal)
        # Phase one: the request repairs, ending in what goes upstream.
        forwarded, changed = await self.phases.request(
            chat, recalled.applied(rules), scope, record.tally
        )
        record.forwarded = forwarded
        content = untouched if untouched is not None and not changed else None
        record.sent_as_received = content is not None

        async def rebuild(rules: RouteRules) -> Rebuilt:
            """Phase one again from the client's own bytes, with the rules a refusal called
            for (upstream/refusals.py): a fresh tally with the translation's counts, a fresh
            Forwarded, so phase two knows what went up. A translation that now refuses (a
            front's stored transcript gone) leaves the refusal standing."""
            assert record.forwarded is not None
            try:
                again = await self._translated(door, door.parse(raw), arrival)
            except Refused:  # unchanged: the upstream's refusal stands
                return Rebuilt(record.forwarded, record.tally)
            tally = Tally(request_id)
            _count(tally, again.counts)
            forwarded, _ = await self.phases.request(again.chat, rules, scope, tally)

            def adopt() -> None:
                nonlocal front
                front = again

            return Rebuilt(forwarded, tally, adopt)

        upstream = await exchanges.send(
            request,
            route,
            CHAT_PATH,
            content if content is not None else json_codec.dumps(forwarded.body),
            record,
            resend=forwarded.body,
            rebuild=rebuild,
            own_parameters=door.query_parameters,
        )
        if isinstance(upstream, Response):
            return exchanges.failed(record, door.restyled(upstream))
        if door.keeps_client_request and record.client_copy is not None:
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
        if record.refused_part is not None and not door.relays_refusals:
            return await self._part_refused(door, front, record, upstream)
        status = upstream.status_code
        head = upstream.headers
        encoding = head.get("content-encoding", "")  # an httpx lookup costs 1.5 µs: once
        delivery = delivery_mode(
            status,
            front.stream,
            head.get("content-type", ""),
            encoding,
            relays_unframed_streams=door.relays_unframed_streams,
        )
        answer = Answer(exchanges, self.phases, door, front, arrival, record, upstream)
        if delivery.mode is Mode.REFUSED:
            return await answer.refused(delivery.unrepaired_encoding)
        if delivery.mode is Mode.RELAY:
            return answer.relayed()
        # Phase two (the answer's machine, built by `answer` from what phase one decided),
        # rendered by the door.
        rendering = door.rendering(front, body, arrival, record)
        if delivery.mode is Mode.SSE:
            return answer.streamed(encoding, rendering)
        return await answer.whole(encoding, rendering, folded=delivery.mode is Mode.FOLD)

    async def _part_refused(
        self, door: Door[F, R], front: F, record: ExchangeRecord, upstream: httpx.Response
    ) -> Response:
        """The upstream just refused a content part no repair stands in for: the door's own
        400 naming it, with the upstream's words (read within the refusal reader's bound)."""
        assert record.refused_part is not None
        status = upstream.status_code
        upstream, text = await read_refusal(upstream)
        await upstream.aclose()
        said = read_error(text.encode()).message if text is not None else ""
        model = front.chat.get("model")
        answer = door.part_refused(front, record.refused_part, model, said or f"{status}")
        if record.client_copy is not None:  # recorded like any refusal, for --replay
            record.client_copy.sent(bytes(answer.body))
            await record.client_copy.save()
        return self.exchanges.failed(record, answer)

    async def _translated(self, door: Door[F, R], body: dict[str, Any], arrival: Arrival) -> F:
        front = await door.translate(body, arrival)
        upstream_model = arrival.route.upstream.model
        if upstream_model and front.chat.get("model") != upstream_model:
            front.chat["model"] = upstream_model
        return front

    def _refused(
        self, request: Request, request_id: str, refusal: Refused, model: object = None
    ) -> Response:
        """Refused before anything went upstream: logged and counted like the rest."""
        response = Response(
            json_codec.dumps(refusal.body),
            status_code=refusal.status,
            media_type="application/json",
        )
        return self.exchanges.failed(plain_record(request, request_id, "-", model), response)


def _count(tally: Tally, counts: dict[str, int]) -> None:
    """What the translation did, on the exchange's tally beside the repairs."""
    for kind, amount in counts.items():
        tally.count(kind, amount)
