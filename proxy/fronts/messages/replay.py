"""`streamfix replay` and `streamfix explain` on a Messages exchange: what a comparison of
today's answer with the recorded one sets aside. The `ping`s of the recording depend on timing,
not on the repairs; each answer mints its message id, the thinking signature naming its turn
and an id for a tool call that came without one (fronts/minted.py). `message_start`'s
`input_tokens` is the proxy's estimate, at the ratio its answers had taught it then
(learning/token_ratios.py): a comparison reads it as 0 on both sides."""

from __future__ import annotations

import re

from proxy.wire import json_codec

PING = b'event: ping\ndata: {"type":"ping"}\n\n'
MINTED = ("id", "signature")
_START_ESTIMATE = re.compile(
    rb'(event: message_start\ndata: [^\n]*?"usage":\{"input_tokens":)[0-9]+'
)


def without_pings(client_body: bytes) -> bytes:
    return client_body.replace(PING, b"")


def without_estimate(client_body: bytes) -> bytes:
    """The stream with its `message_start` estimate read as 0."""
    return _START_ESTIMATE.sub(rb"\g<1>0", client_body, count=1)


def is_answer(client_body: bytes) -> bool:
    """Whether a recorded client copy is a Messages answer: its events, or a message."""
    if client_body.startswith(b"event: message_start"):
        return True
    try:
        body = json_codec.loads(client_body)
    except json_codec.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("type") == "message"
