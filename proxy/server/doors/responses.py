"""`POST /v1/responses`: the Responses door on the exchange runner (server/exchange_runner.py).

The same admission, auth, routes, limits, learning, metrics, log line and `x-streamfix-repairs`
as chat completions: the Responses request becomes the chat request (fronts/responses/
request.py), that goes through the request repairs and upstream exactly as a chat request
does, and the repaired chat chunks become Responses events (fronts/responses/events.py).

An upstream refusal before the first byte is answered with its HTTP status and an OpenAI error
body, never as a stream: Codex retries a `response.failed` five times, so a deterministic 400
would become six requests. While the upstream is silent, a `response.in_progress` goes out
every `server.keepalive_seconds` (Codex gives up after 300 s of silence). What a follow-up
needs (the turn's receipts, the transcript, the items) is written before the terminal event.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.fronts.responses.compaction import CompactionEvents, compaction_key
from proxy.fronts.responses.events import CLEAN, ResponsesEvents, completion_chunk, whole
from proxy.fronts.responses.openai_errors import completed_error
from proxy.fronts.responses.request import Lookups, Translation, openai_error, translate
from proxy.fronts.responses.store import ResponsesStore, records
from proxy.fronts.turns import turn_key
from proxy.learning.refused_parts import RefusedPart
from proxy.server.doors.door import Arrival
from proxy.server.doors.translated import TranslatedDoor, TranslatedRendering
from proxy.wire import json_codec
from proxy.wire.error_bodies import read_error

STORE_FAILED_KIND = "responses_store_failed"


class ResponsesDoor(TranslatedDoor[Translation, ResponsesEvents]):
    name = "responses"
    path = "/v1/responses"
    store_failed_kind = STORE_FAILED_KIND
    # No query parameters of its own: `POST /v1/responses` defines none, openai-python and
    # Codex send none, and what a Codex provider's `query_params` adds (Azure's `api-version`)
    # is meant for the upstream, so it goes on.

    def error_body(self, status: int, message: str, code: str) -> dict[str, Any]:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return openai_error(message, code, kind=kind)

    def restyled(self, response: Response) -> Response:
        """The proxy's own error (keys, limits, an unreachable upstream) with OpenAI's `param`,
        its status and headers kept."""
        try:
            completed = completed_error(json_codec.loads(bytes(response.body)))
        except json_codec.JSONDecodeError:
            completed = None
        if completed is None:
            return response
        out = _json(response.status_code, completed)
        for name, value in response.raw_headers:
            if name.lower() not in (b"content-length", b"content-type"):
                out.raw_headers.append((name, value))
        return out

    def upstream_refusal(self, status: int, body: bytes) -> Response:
        said = read_error(body)
        kind = "invalid_request_error" if status < 500 else "server_error"
        text = body.decode("utf-8", "replace")[:500] if body else ""
        return _json(
            status,
            openai_error(
                said.message or text or f"upstream answered {status}",
                said.code or "upstream_error",
                said.param,
                said.type or kind,
            ),
        )

    def part_refused(
        self, front: Translation, part: RefusedPart, model: object, said: str | None
    ) -> Response:
        """The `input_file` parts the refused `file` parts came from, by their places in the
        client's request (`input[0].content[1]`)."""
        message = part.message(
            front.files, model, said, block="an `input_file` part", instead="an `input_text` part"
        )
        return self.error(400, message, part.refused_kind)

    async def translate(self, body: dict[str, Any], arrival: Arrival) -> Translation:
        store = _store(arrival)
        lookups = Lookups(
            store.transcript, store.turn, store.items, store.token_scope, store.summary
        )
        return await translate(body, lookups)

    def translator(
        self, front: Translation, body: dict[str, Any], arrival: Arrival
    ) -> ResponsesEvents:
        if front.compacting:
            compaction = CompactionEvents(front, body)
            if arrival.turns.usable:
                compaction.token = arrival.turns.mint(compaction_key(compaction.id))
            return compaction
        events = ResponsesEvents(front, body)
        if arrival.turns.usable:
            events.token = arrival.turns.mint(turn_key(events.id))
        return events

    def whole_body(
        self, front: Translation, translator: ResponsesEvents, completion: dict[str, Any]
    ) -> tuple[bytes, str]:
        if front.stream:
            # An upstream that answered a streamed request whole: the client still gets events.
            parts = translator.feed(completion_chunk(completion)) + translator.finish(CLEAN)
            return b"".join(parts), "text/event-stream"
        return json_codec.dumps(whole(translator, completion)), "application/json"

    def records(
        self,
        front: Translation,
        forwarded: dict[str, Any],
        rendering: TranslatedRendering[ResponsesEvents],
        turn: dict[str, Any] | None,
    ) -> dict[str, dict[str, Any]]:
        """When the client stores: the repaired transcript (what went upstream, this answer
        last) for `previous_response_id`, and the output items for `item_reference`. A
        compaction's summary whatever `store` says."""
        translator = rendering.translator
        if isinstance(translator, CompactionEvents):
            return translator.records()
        if turn is None or not front.store:
            return {}
        transcript = [*front.transcript_without_instructions(forwarded["messages"]), turn]
        return records(translator.id, transcript, translator.output)


RESPONSES = ResponsesDoor()


def _store(arrival: Arrival) -> ResponsesStore:
    return ResponsesStore(arrival.turns.store, arrival.turns.scope)


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(json_codec.dumps(body), status_code=status, media_type="application/json")


async def not_offered(request: Request) -> Response:
    """GET /v1/responses/{id}, /input_items, /cancel, /compact: not offered, said plainly.
    `/compact` too: Codex no longer calls it (its remote compaction is a `compaction_trigger`
    on `/v1/responses`, served there), and no other client this bridge serves does."""
    message = (
        "streamfix's Responses bridge does not offer "
        f"{request.method} {request.url.path}: responses are answered and kept only for "
        "previous_response_id and item_reference"
    )
    return _json(501, openai_error(message, "not_implemented"))
