"""`POST /v1/messages` and `/v1/messages/count_tokens`: Anthropic's Messages API in front of
the chat core, as a door on the fronts' runner (front_exchange.py).

The Messages request becomes a chat request (proxy/fronts/messages/request.py), which then goes
exactly the way a chat client's does: the same admission and limits, the same repair chain on
the request and on every chunk, the same send, learning, metrics and log line. The repaired
chunks become Messages events (proxy/fronts/messages/events.py). A thinking block's signature is
a receipt token naming the answer's turn (fronts/turns.py), kept before `message_stop`; the
follow-up that sends the block back gets the turn's receipts on its assistant message. What the
bridge itself did is counted on the exchange beside the repairs, so `x-streamfix-repairs`, the
log line and the metrics show it.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.fronts.messages import events as message_events
from proxy.fronts.messages.request import MessagesError, Translated, error_body, translate
from proxy.fronts.turns import restore_turns
from proxy.routing.routes import Router
from proxy.server.doors import Arrival, Door
from proxy.server.exchanges import Exchanges, plain_record, request_id_of
from proxy.upstream.headers import RawHeaders
from proxy.wire import json_codec

STORE_FAILED_KIND = "messages_store_failed"

# Anthropic's request headers mean nothing to a chat upstream; the key moves to Authorization.
_ANTHROPIC_ONLY = frozenset({b"anthropic-version", b"anthropic-beta", b"x-api-key"})


class MessagesDoor(Door[Translated, message_events.MessageEvents]):
    store_failed_kind = STORE_FAILED_KIND

    def chat_headers(self, raw: RawHeaders) -> RawHeaders:
        """The client's headers as a chat upstream expects them: `x-api-key` becomes
        `Authorization: Bearer` (unless the client sent one), Anthropic's own headers go. The
        tenant is then the same as a chat client's with that key (proxy/repair/tenancy.py)."""
        names = {name.lower() for name, _ in raw}
        key = next((value for name, value in raw if name.lower() == b"x-api-key"), None)
        out = [(name, value) for name, value in raw if name.lower() not in _ANTHROPIC_ONLY]
        if key and b"authorization" not in names:
            out.append((b"authorization", b"Bearer " + key.strip()))
        return out

    def error(self, status: int, message: str, code: str) -> Response:
        return JSONResponse(error_body(status, message), status_code=status)

    def restyled(self, response: Response) -> Response:
        """The proxy's own OpenAI-shaped error (auth, limits, an unreachable upstream) in
        Anthropic's shape, with its status and headers."""
        said = message_events.error_message(_loads(bytes(response.body)))
        out = self.error(response.status_code, said, "")
        for name, value in response.raw_headers:
            if name.lower() not in (b"content-length", b"content-type"):
                out.raw_headers.append((name, value))
        return out

    def upstream_refusal(self, status: int, body: bytes) -> Response:
        return self.error(status, message_events.error_message(_loads(body)), "")

    async def translate(self, body: dict[str, Any], arrival: Arrival) -> Translated:
        """The chat request, and the receipts of every turn whose thinking signature names
        one, put back on its assistant message (a turn the store's own keys cannot name, a
        text-only DeepSeek turn, still comes back)."""
        turns = arrival.turns
        translated = translate(body, arrival.client_headers, turns.read)
        named = translated.receipt_messages()
        if named and turns.usable:
            restored, unknown = await restore_turns(named, turns.turn)
            translated.count("messages_receipts_restored", restored)
            translated.count("messages_receipt_token_unknown", unknown)
        return translated

    def translator(
        self, front: Translated, body: dict[str, Any], arrival: Arrival
    ) -> message_events.MessageEvents:
        return message_events.MessageEvents(
            front.model, mint=arrival.turns.mint, stop_sequences=front.stop_sequences
        )

    def whole_body(
        self,
        front: Translated,
        translator: message_events.MessageEvents,
        completion: dict[str, Any],
    ) -> tuple[bytes, str]:
        message = translator.whole(completion)
        if front.stream:  # asked to stream, answered whole: the same message as events
            return b"".join(message_events.events_of(message)), "text/event-stream"
        # Encoded as `streamfix replay` renders it (fronts/messages/replay.py), byte for byte.
        return json_codec.dumps(message), "application/json"


MESSAGES = MessagesDoor()


def _loads(raw: bytes) -> Any:
    try:
        return json_codec.loads(raw)
    except json_codec.JSONDecodeError:
        return raw.decode(errors="replace")[:500]


async def count_tokens(exchanges: Exchanges, router: Router, request: Request) -> Response:
    """An estimate, said to be one: chat-completions upstreams have no counting endpoint, so
    the answer is the UTF-8 size of the chat request this body becomes, divided by four (the
    rule of thumb for English text and JSON with BPE tokenizers), rounded up. The
    `x-streamfix-token-count: estimate` header says so; Claude Code's Read tool uses the number
    to judge whether a file fits, for which an estimate serves."""
    request_id = request_id_of(request)
    raw = await exchanges.admitted_body(request, request_id)
    if isinstance(raw, Response):
        return MESSAGES.restyled(raw)
    try:
        given = json_codec.loads(raw)
        if isinstance(given, dict):
            given = {"max_tokens": 1, **given}  # count_tokens takes no max_tokens
        chat = translate(given, request.headers).body
    except (json_codec.JSONDecodeError, MessagesError) as exc:
        error = exc if isinstance(exc, MessagesError) else MessagesError(f"invalid JSON: {exc}")
        record = plain_record(request, request_id, "-", None)
        return exchanges.failed(record, JSONResponse(error.body, status_code=error.status))
    size = len(json_codec.dumps([chat["messages"], chat.get("tools", [])]))
    response = JSONResponse({"input_tokens": math.ceil(size / 4)})
    response.headers["x-streamfix-token-count"] = "estimate"
    # Booked under the route the model names, as Claude Code's main requests are.
    route = router.route_for(chat.get("model"))
    record = plain_record(request, request_id, route.name, chat.get("model"))
    return exchanges.failed(record, response)  # booked and headed like any exchange
