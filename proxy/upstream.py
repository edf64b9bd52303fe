"""Talking to the upstream: which headers cross, where requests go, how failures read."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import httpx

from proxy.settings import UpstreamSettings

# httpx logs every request URL at INFO and DEBUG, query string included, and a query string can
# carry a credential (Google's `?key=`). The proxy logs its own line per exchange instead.
for _name in ("httpx", "httpcore"):
    logging.getLogger(_name).setLevel(logging.WARNING)

# RFC 9110 §7.6.1 hop-by-hop fields, plus those httpx or the server recompute per connection.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def _connection_listed(headers: Mapping[str, str]) -> set[str]:
    listed = headers.get("connection", "")
    return {name.strip().lower() for name in listed.split(",") if name.strip()}


def request_headers(
    incoming: Iterable[tuple[str, str]],
    request_id: str,
    credential: str | None = None,
    drop_credential: bool = False,
) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones. Upstream is asked not to compress, so bodies
    can be repaired as they stream and forwarded without re-encoding. A route's own key
    replaces the client's credential; the proxy's own keys never travel upstream."""
    pairs = [(name.lower(), value) for name, value in incoming]
    dropped = HOP_BY_HOP | _connection_listed(dict(pairs)) | {"accept-encoding", "x-request-id"}
    if credential or drop_credential:
        dropped |= {"authorization", "x-api-key"}
    kept = [(name, value) for name, value in pairs if name not in dropped]
    extra = [("authorization", f"Bearer {credential}")] if credential else []
    return [*kept, *extra, ("accept-encoding", "identity"), ("x-request-id", request_id)]


def response_headers(upstream: httpx.Headers) -> dict[str, str]:
    """Upstream response headers the client may see. The body is re-framed and already decoded
    by httpx, so length and encoding are the server's business, not the upstream's."""
    # uvicorn writes its own date and server headers: the upstream's would go out twice.
    dropped = HOP_BY_HOP | _connection_listed(upstream) | {"content-encoding", "date", "server"}
    return {name: value for name, value in upstream.items() if name.lower() not in dropped}


class UnsafePath(ValueError):
    """A client path that would climb out of the upstream's base path (`../`)."""


def upstream_url(settings: UpstreamSettings, path: str, query: str) -> str:
    """`path` is relative to the client's `/v1/`; the base URL is fixed by configuration, so no
    client header or path can send the proxy anywhere else."""
    if any(segment in (".", "..") for segment in path.replace("\\", "/").split("/")):
        raise UnsafePath(f"path segments '.' and '..' are not allowed: {path!r}")
    url = f"{settings.base_url.rstrip('/')}/{path.lstrip('/')}"
    return f"{url}?{query}" if query else url


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
    return 502, f"upstream connection failed: {type(exc).__name__}", "upstream_failed"
