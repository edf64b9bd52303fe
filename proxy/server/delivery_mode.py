"""How an upstream answer reaches the client: relayed untouched, or repaired as a stream or as
one body. Decided here once, for the app, `streamfix explain` and `streamfix replay`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from proxy.upstream.body_decoding import decodes


class Mode(Enum):
    RELAY = "relayed"
    """The upstream's bytes as they came: an error, a path the repairs do not read, a stream
    that is not SSE, a body in an encoding the proxy does not decode."""
    SSE = "stream"
    """A streamed answer, event by event through the repairs."""
    JSON = "json"
    """A non-streamed answer, read whole and repaired."""


@dataclass(frozen=True, slots=True)
class Delivery:
    mode: Mode
    unrepaired_encoding: str | None = None
    """The `Content-Encoding` an answer the repairs would have read is relayed in, because the
    proxy does not decode it (an anomaly worth a note); None otherwise."""


_RELAY = Delivery(Mode.RELAY)
_SSE = Delivery(Mode.SSE)
_JSON = Delivery(Mode.JSON)


def delivery_mode(
    status: int, stream_requested: bool, content_type: str, content_encoding: str
) -> Delivery:
    """The delivery of a chat completion's answer, from its status and head and whether the
    client asked for a stream. Only a success is repaired: an error is the upstream's to say."""
    if status >= 400:
        return _RELAY
    if not decodes(content_encoding):
        return Delivery(Mode.RELAY, content_encoding)
    if stream_requested:
        return _SSE if content_type.startswith("text/event-stream") else _RELAY
    return _JSON
