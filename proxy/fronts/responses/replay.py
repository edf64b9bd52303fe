"""`streamfix replay` and `streamfix explain` on a Responses exchange: what a comparison of
today's answer with the recorded one sets aside. Each answer mints its response id,
`created_at` and `completed_at`, its items' ids, the `encrypted_content` token naming its
turn and an id for a call that came without one (fronts/minted.py). The keepalives of the
recording (`response.in_progress` events after the first) depend on timing, not on the
repairs: they are left out, and the sequence numbers counted again without them.
"""

from __future__ import annotations

from typing import Any

from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder

_STREAM_START = b"event: response.created"
_KEEPALIVE = "response.in_progress"
MINTED = ("id", "created_at", "completed_at", "encrypted_content", "call_id")


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


def is_answer(client_body: bytes) -> bool:
    """Whether a recorded client copy is a Responses answer: its events, or a response."""
    if client_body.startswith(_STREAM_START):
        return True
    body = _json(client_body)
    return isinstance(body, dict) and body.get("object") == "response"


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
