"""Talking to the upstream: which headers cross, where requests go, how failures read."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import unquote_plus

import httpx

from proxy.wire.credentials import CREDENTIAL_HEADERS, CREDENTIAL_PARAMETERS
from proxy.server.paths import UnsafePath
from proxy.settings.schema import UpstreamSettings

__all__ = ["UnsafePath"]

# httpx logs every request URL at INFO and DEBUG, query string included, and a query string can
# carry a credential (Google's `?key=`). The proxy logs its own line per exchange instead.
for _name in ("httpx", "httpcore"):
    logging.getLogger(_name).setLevel(logging.WARNING)

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
    dropped = HOP_BY_HOP | _connection_listed(pairs) | {b"accept-encoding", b"x-request-id"}
    if credential or drop_credential:
        dropped |= CLIENT_CREDENTIALS
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
    # uvicorn writes its own date and server headers, and the proxy its own request id: the
    # upstream's would go out twice.
    dropped = HOP_BY_HOP | _connection_listed(raw) | {b"date", b"server", b"x-request-id"}
    if decoded:
        dropped = dropped | {b"content-encoding"}
    return [(name, value) for name, value in raw if name.lower() not in dropped]


def without_credential_parameters(raw_query: bytes) -> bytes:
    """The query string minus credential parameters (Google's `?key=`), for when the client's
    credential must not travel upstream."""
    kept = [
        field
        for field in raw_query.split(b"&")
        if field
        and unquote_plus(field.partition(b"=")[0].decode("latin-1")).lower()
        not in CREDENTIAL_PARAMETERS
    ]
    return b"&".join(kept)


def upstream_url(settings: UpstreamSettings, raw_relative: bytes, raw_query: bytes) -> httpx.URL:
    """`raw_relative` is the client's path after `/v1/`, as it sent it (checked by
    `paths.checked_relative`); the base URL is fixed by configuration, so no client header or
    path can send the proxy anywhere else."""
    base = httpx.URL(settings.base_url)
    raw_path = base.raw_path.rstrip(b"/") + b"/" + raw_relative.lstrip(b"/")
    if raw_query:
        raw_path += b"?" + raw_query
    return base.copy_with(raw_path=raw_path)


def client_timeout(settings: UpstreamSettings) -> httpx.Timeout:
    return httpx.Timeout(
        connect=settings.connect_timeout,
        read=settings.read_timeout,
        write=settings.read_timeout,
        pool=settings.connect_timeout,
    )


def describe_failure(exc: Exception) -> tuple[int, str, str]:
    """HTTP status, message and error code for a failure to reach or read the upstream."""
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return 504, "upstream connect timed out", "upstream_timeout"
    if isinstance(exc, httpx.TimeoutException):
        return 504, "upstream read timed out", "upstream_timeout"
    if isinstance(exc, httpx.ConnectError):
        return 502, "could not connect to the upstream", "upstream_unreachable"
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        # The own client's failures say what the upstream did (a head past its limit, a close
        # without an answer and whether the request was sent again) and carry no request data.
        return 502, str(exc), code
    return 502, f"upstream connection failed: {type(exc).__name__}", "upstream_failed"
