"""Messages events as Anthropic frames them: an `event:` line named after the event's type,
then its JSON. The block and ending events are written here once, for the streamed answer
and for a whole answer sent as a stream."""

from __future__ import annotations

import os
from typing import Any

from proxy.wire import json_codec


def new_message_id() -> str:
    return "msg_" + os.urandom(12).hex()


def sse(event: dict[str, Any]) -> bytes:
    """One named event, as Anthropic frames them (`event:` line, then its JSON)."""
    name: str = event["type"]
    return b"event: " + name.encode() + b"\ndata: " + json_codec.dumps(event) + b"\n\n"


PING = sse({"type": "ping"})


def block_start(index: int, block: dict[str, Any]) -> bytes:
    return sse({"type": "content_block_start", "index": index, "content_block": block})


def block_delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse({"type": "content_block_delta", "index": index, "delta": delta})


def block_stop(index: int) -> bytes:
    return sse({"type": "content_block_stop", "index": index})


def message_end(delta: dict[str, Any], usage: dict[str, Any]) -> list[bytes]:
    """`message_delta` (the stop reason, the usage), then `message_stop`."""
    return [
        sse({"type": "message_delta", "delta": delta, "usage": usage}),
        sse({"type": "message_stop"}),
    ]
