"""`streamfix replay` (and `explain`) on a Responses exchange: today's repaired chat answer
rendered as the Responses front would have sent it, to compare with what the client was sent.

A cassette holds the chat request that went upstream and the bytes the client got; for a
Responses client those are Responses events (or a response object). The replay runs the chat
answer through today's repairs as for any cassette, then this module renders it with what the
recorded response minted per answer, taken as recorded: its id and `created_at`, its items' ids
in order, the `encrypted_content` token, and the request's echoed fields. The keepalives of the
recording (`response.in_progress` events after the first) depend on timing, not on the repairs:
they are left out of both sides, and the sequence numbers counted again without them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from proxy.fronts.rendering import Rendering
from proxy.fronts.responses.events import CLEAN, ResponsesEvents, completion_chunk, new_id
from proxy.fronts.responses.request import Translation, chat_tools
from proxy.fronts.translator import Translator
from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder

_STREAM_START = b"event: response.created"
_KEEPALIVE = "response.in_progress"


def _json(data: str | bytes | None) -> Any:
    if not data:
        return None
    try:
        return json_codec.loads(data)
    except json_codec.JSONDecodeError:
        return None


def _events(body: bytes) -> list[dict[str, Any]]:
    decoder = SSEDecoder(len(body) + 1)
    found = [_json(event.data) for event in [*decoder.feed(body), *decoder.flush()]]
    return [event for event in found if isinstance(event, dict)]


def _recorded(client_body: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The recorded response object and its items in output order; None when the client was
    not a Responses client."""
    if client_body.startswith(_STREAM_START):
        events = _events(client_body)
        response = events[0].get("response") if events else None
        if not isinstance(response, dict):
            return None
        added = [
            event["item"]
            for event in events
            if event.get("type") == "response.output_item.added"
            and isinstance(event.get("item"), dict)
        ]
        return response, added
    body = _json(client_body)
    if isinstance(body, dict) and body.get("object") == "response":
        output = body.get("output")
        return body, [item for item in output or () if isinstance(item, dict)]
    return None


def _translator(response: dict[str, Any], items: list[dict[str, Any]]) -> ResponsesEvents:
    """A translator that mints what the recorded one minted."""
    model = str(response.get("model") or "")
    translation = Translation({"model": model}, True, response.get("store") is not False, model)
    chat_tools(response.get("tools"), translation)  # which tools were custom or namespaced
    ids: Iterator[Any] = iter([item.get("id") for item in items])
    tokens = [item["encrypted_content"] for item in items if item.get("encrypted_content")]

    def item_id(prefix: str) -> str:
        recorded = next(ids, None)
        return recorded if isinstance(recorded, str) else new_id(prefix)

    created = response.get("created_at")
    return ResponsesEvents(
        translation,
        response,  # it echoes the request's fields as the recorded answer did
        response_id=str(response.get("id") or ""),
        token=tokens[0] if tokens else None,
        created_at=created if isinstance(created, int) else None,
        item_id=item_id,
    )


def _whole_events(translator: Translator, completion: dict[str, Any]) -> list[bytes]:
    """A streamed request the upstream answered whole: its events, as the door sends them."""
    opened = translator.feed(completion_chunk(completion))
    return opened + translator.settle(CLEAN) + translator.terminal()


def rendering(client_body: bytes, request: Any) -> Rendering | None:
    """A renderer of today's chat answer primed with what the recorded response minted; None
    when `client_body` is not a Responses answer."""
    recorded = _recorded(client_body)
    if recorded is None:
        return None
    streamed = client_body.startswith(_STREAM_START)
    return Rendering(_translator(*recorded), streamed, _whole_events)


def rendered(client_body: bytes, chat_output: bytes, request: Any) -> bytes | None:
    """`chat_output` (today's repaired chat answer) as the Responses front renders it for the
    recorded response; None when `client_body` is not a Responses answer."""
    found = rendering(client_body, request)
    return None if found is None else found.render(chat_output)


def without_keepalives(client_body: bytes) -> bytes:
    """A recorded Responses stream without its keepalives, numbered again from 0."""
    if not client_body.startswith(_STREAM_START):
        return client_body
    events = _events(client_body)
    starts = [i for i, event in enumerate(events) if event.get("type") == _KEEPALIVE]
    if len(starts) <= 1:
        return client_body
    kept = [event for i, event in enumerate(events) if i not in starts[1:]]
    out = []
    for sequence, event in enumerate(kept):
        event["sequence_number"] = sequence
        kind = str(event.get("type"))
        out.append(b"event: " + kind.encode() + b"\ndata: " + json_codec.dumps(event) + b"\n\n")
    return b"".join(out)
