"""Which headers cross the proxy, in each direction, as the bytes they were."""

from __future__ import annotations

from collections.abc import Iterable

import httpx

from proxy.wire.credentials import CREDENTIAL_HEADERS

# RFC 9110 §7.6.1 hop-by-hop fields, plus those httpx or the server recompute per connection.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
# When a route spends a key of its own, or the proxy's own keys are on, no header form of a
# client credential travels upstream beside it.
CLIENT_CREDENTIALS = frozenset(name.encode() for name in CREDENTIAL_HEADERS)

RawHeaders = list[tuple[bytes, bytes]]

# What never crosses, whatever the message says, as one set each (built once, not per request).
_NOT_FORWARDED = HOP_BY_HOP | {b"accept-encoding", b"x-request-id"}
_NOT_FORWARDED_NOR_CREDENTIALS = _NOT_FORWARDED | CLIENT_CREDENTIALS
# uvicorn writes its own date and server headers, and the proxy its own request id: the
# upstream's would go out twice.
_NOT_RETURNED = HOP_BY_HOP | {b"date", b"server", b"x-request-id"}
_NOT_RETURNED_DECODED = _NOT_RETURNED | {b"content-encoding"}


def _connection_listed(pairs: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    return {
        name.strip().lower()
        for key, value in pairs
        if key.lower() == b"connection"
        for name in value.split(b",")
        if name.strip()
    }


def request_headers(
    incoming: Iterable[tuple[bytes, bytes]],
    request_id: str,
    credential: str | None = None,
    drop_credential: bool = False,
) -> RawHeaders:
    """The client's headers, as the bytes it sent (a UTF-8 `X-Title: Café` crosses unchanged),
    minus hop-by-hop ones. Upstream is asked not to compress, so bodies can be repaired as they
    stream. A route's own key replaces the client's credential; the proxy's own keys never
    travel upstream."""
    pairs = [(name.lower(), value) for name, value in incoming]
    dropped = _NOT_FORWARDED_NOR_CREDENTIALS if credential or drop_credential else _NOT_FORWARDED
    listed = _connection_listed(pairs)
    if listed:
        dropped = dropped | listed
    kept = [(name, value) for name, value in pairs if name not in dropped]
    extra = [(b"authorization", f"Bearer {credential}".encode())] if credential else []
    return [
        *kept,
        *extra,
        (b"accept-encoding", b"identity"),
        (b"x-request-id", request_id.encode("latin-1")),
    ]


def response_headers(upstream: httpx.Headers, decoded: bool) -> RawHeaders:
    """Upstream response headers the client may see, each field as its own line (two
    `Set-Cookie`s stay two). The body is re-framed by the server, so length is the server's
    business; `Content-Encoding` goes only when the proxy decoded the body (`decoded`)."""
    raw = upstream.raw
    dropped = _NOT_RETURNED_DECODED if decoded else _NOT_RETURNED
    listed = _connection_listed(raw)
    if listed:
        dropped = dropped | listed
    return [(name, value) for name, value in raw if name.lower() not in dropped]
