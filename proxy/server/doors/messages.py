"""`POST /v1/messages`: Anthropic's Messages API in front of
the chat core, as a door on the exchange runner (server/exchange_runner.py).

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

from typing import Any

from starlette.responses import Response

from proxy.fronts.messages import events as message_events
from proxy.fronts.messages.request import Translated, error_body, translate
from proxy.fronts.turns import restore_turns
from proxy.learning.refused_parts import RefusedPart
from proxy.learning.token_ratios import GUESSED
from proxy.server.doors.door import Arrival
from proxy.server.doors.translated import TranslatedDoor, TranslatedRendering
from proxy.server.record import ExchangeRecord
from proxy.upstream.headers import RawHeaders
from proxy.wire import json_codec
from proxy.wire.error_bodies import read_error

STORE_FAILED_KIND = "messages_store_failed"

# Anthropic's request headers mean nothing to a chat upstream; the key moves to Authorization.
_ANTHROPIC_ONLY = frozenset({b"anthropic-version", b"anthropic-beta", b"x-api-key"})


class MessagesDoor(TranslatedDoor[Translated, message_events.MessageEvents]):
    name = "messages"
    path = "/v1/messages"
    store_failed_kind = STORE_FAILED_KIND
    estimates_tokens = True
    query_parameters = frozenset({"beta"})
    """Claude Code asks every request as `POST /v1/messages?beta=true` (Anthropic's TypeScript
    SDK calls its beta resources so): a marker Anthropic's own API reads and a chat upstream
    does not know (Google answers 400 `Cannot bind query parameter`)."""

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

    def error_body(self, status: int, message: str, code: str) -> dict[str, Any]:
        return error_body(status, message)

    def restyled(self, response: Response) -> Response:
        """The proxy's own OpenAI-shaped error (auth, limits, an unreachable upstream) in
        Anthropic's shape, with its status and headers."""
        out = self.error(response.status_code, _said(bytes(response.body)), "")
        for name, value in response.raw_headers:
            if name.lower() not in (b"content-length", b"content-type"):
                out.raw_headers.append((name, value))
        return out

    def upstream_refusal(self, status: int, body: bytes) -> Response:
        return self.error(status, _said(body), "")

    def part_refused(
        self, front: Translated, part: RefusedPart, model: object, said: str | None
    ) -> Response:
        """The `document` blocks the refused `file` parts came from, by their places in the
        client's request (`messages.0.content.1`)."""
        message = part.message(front.documents, model, said, block="a `document` block (a PDF)")
        return self.error(400, message, part.refused_kind)

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
        self, front: Translated, body: dict[str, Any], arrival: Arrival, input_estimate: int = 0
    ) -> message_events.MessageEvents:
        return message_events.MessageEvents(
            front.model,
            mint=arrival.turns.mint,
            stop_sequences=front.stop_sequences,
            input_estimate=input_estimate,
        )

    def rendering(
        self, front: Translated, body: dict[str, Any], arrival: Arrival, record: ExchangeRecord
    ) -> TranslatedRendering[message_events.MessageEvents]:
        """The events, their `message_start` carrying the prompt's estimate: the chat request
        as sent, at what this upstream and model's answers taught (learning/token_ratios.py)."""
        ratio = record.tokens or GUESSED
        estimate = ratio.estimate(record.sent_bytes or 0)
        return self.rendered(self.translator(front, body, arrival, estimate), record)

    def whole_body(
        self,
        front: Translated,
        translator: message_events.MessageEvents,
        completion: dict[str, Any],
    ) -> tuple[bytes, str]:
        message = translator.whole(completion)
        if front.stream:  # asked to stream, answered whole: the same message as events
            return b"".join(message_events.events_of(message)), "text/event-stream"
        return json_codec.dumps(message), "application/json"


MESSAGES = MessagesDoor()


def _said(body: bytes) -> str:
    """The upstream's (or the proxy's own OpenAI-shaped) words for an error."""
    return read_error(body).message or "the upstream reported an error"
