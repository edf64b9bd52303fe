"""`streamfix replay` and `streamfix explain` on a Messages exchange: what a comparison of
today's answer with the recorded one sets aside. The `ping`s of the recording depend on timing,
not on the repairs; each answer mints its message id, the thinking signature naming its turn
and an id for a tool call that came without one (fronts/minted.py)."""

from __future__ import annotations

from proxy.wire import json_codec

PING = b'event: ping\ndata: {"type":"ping"}\n\n'
MINTED = ("id", "signature")


def without_pings(client_body: bytes) -> bytes:
    return client_body.replace(PING, b"")


def is_answer(client_body: bytes) -> bool:
    """Whether a recorded client copy is a Messages answer: its events, or a message."""
    if client_body.startswith(b"event: message_start"):
        return True
    try:
        body = json_codec.loads(client_body)
    except json_codec.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("type") == "message"
