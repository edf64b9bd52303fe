"""`streamfix replay` on a Messages exchange: today's repaired chat answer rendered as the
Messages front would have sent it, to compare with what the client was sent.

A cassette holds the chat request that went upstream and the bytes the client got; for a
Messages client those are Messages events (or a message body). The replay runs the chat answer
through today's repairs as for any cassette, then this module renders it with the recorded
message's id, model and thinking signature (minted per answer, so they are taken as recorded),
and leaves out the `ping`s of the recording (they depend on timing, not on the repairs).
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.messages.events import MessageEvents, events_of
from proxy.fronts.rendering import Rendering
from proxy.fronts.translator import Translator
from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder

PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def _chunk(data: str | None) -> Any:
    if not data or not data.startswith("{"):
        return None
    try:
        return json_codec.loads(data)
    except json_codec.JSONDecodeError:
        return None


def recorded_message(client_body: bytes) -> dict[str, Any] | None:
    """The recorded answer's message (id, model, the first thinking signature), or None when
    the client was not a Messages client."""
    if client_body.startswith(b"event: message_start"):
        decoder = SSEDecoder(len(client_body) + 1)
        events = [*decoder.feed(client_body), *decoder.flush()]
        start = _chunk(events[0].data)
        message = dict(start["message"]) if isinstance(start, dict) else {}
        for event in events:
            data = _chunk(event.data)
            delta = data.get("delta") if isinstance(data, dict) else None
            if isinstance(delta, dict) and delta.get("type") == "signature_delta":
                message["signature"] = delta.get("signature", "")
                break
        return message
    body = _chunk(client_body.decode("utf-8", "replace"))
    if isinstance(body, dict) and body.get("type") == "message":
        for block in body.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "thinking":
                return {**body, "signature": block.get("signature", "")}
        return body
    return None


def without_pings(client_body: bytes) -> bytes:
    return client_body.replace(PING, b"")


def _whole_events(translator: Translator, completion: dict[str, Any]) -> list[bytes]:
    """A streamed request the upstream answered whole: the message as events (the door's)."""
    return events_of(translator.whole(completion))


def rendering(client_body: bytes, request: Any) -> Rendering | None:
    """A renderer of today's chat answer primed with the recorded message's id, model and
    signature; None when `client_body` is not a Messages answer."""
    message = recorded_message(client_body)
    if message is None:
        return None
    signature = str(message.get("signature", ""))
    stops = request.get("stop") if isinstance(request, dict) else None
    translator = MessageEvents(
        str(message.get("model", "")),
        message_id=message.get("id"),
        mint=lambda key: signature,
        stop_sequences=stops if isinstance(stops, list) else None,
    )
    return Rendering(translator, client_body.startswith(b"event:"), _whole_events)


def rendered(client_body: bytes, chat_output: bytes, request: Any) -> bytes | None:
    """`chat_output` (today's repaired chat answer) as the Messages front renders it for the
    recorded message; None when `client_body` is not a Messages answer."""
    found = rendering(client_body, request)
    return None if found is None else found.render(chat_output)
