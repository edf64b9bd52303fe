"""How an upstream answer reaches the client: refused, relayed untouched, or repaired as a
stream, as one body, or as a stream folded into one body. Decided here once, for every door,
`streamfix explain` and `streamfix replay`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from proxy.upstream.body_decoding import decodes


class Mode(Enum):
    REFUSED = "refused"
    """An error status, or a success in an encoding the proxy does not decode: relayed to a
    client that speaks the upstream's protocol, in its own error shape to any other."""
    RELAY = "relayed"
    """The upstream's bytes as they came: a streamed request answered with something that is
    not an event stream, for a door that relays it."""
    SSE = "stream"
    """A streamed answer, event by event through the repairs."""
    JSON = "json"
    """A non-streamed answer, read whole and repaired."""
    FOLD = "folded"
    """An event stream answering a request that asked for one body (gateways and local
    servers that stream whatever `stream` says): repaired event by event, folded into one."""


@dataclass(frozen=True, slots=True)
class Delivery:
    mode: Mode
    unrepaired_encoding: str | None = None
    """The `Content-Encoding` of an answer the repairs would have read, which the proxy does
    not decode (an anomaly worth a note); None otherwise."""


_REFUSED = Delivery(Mode.REFUSED)
_RELAY = Delivery(Mode.RELAY)
_SSE = Delivery(Mode.SSE)
_JSON = Delivery(Mode.JSON)
_FOLD = Delivery(Mode.FOLD)


def delivery_mode(
    status: int,
    stream_requested: bool,
    content_type: str,
    content_encoding: str,
    *,
    relays_unframed_streams: bool = True,
) -> Delivery:
    """The delivery of a chat completion's answer, from its status and head and whether the
    client asked for a stream. Only a success is repaired: an error is the upstream's to say.
    `relays_unframed_streams`: the door relays a streamed request's answer that is not an event
    stream (the chat door) rather than rendering it whole as its stream (a front)."""
    if status >= 400:
        return _REFUSED
    if not decodes(content_encoding):
        return Delivery(Mode.REFUSED, content_encoding)
    event_stream = content_type.startswith("text/event-stream")
    if stream_requested:
        if event_stream:
            return _SSE
        return _RELAY if relays_unframed_streams else _JSON
    return _FOLD if event_stream else _JSON
