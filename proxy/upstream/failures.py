"""How a failure to reach or read the upstream reads to the client: which upstream, and why.

The message names the upstream by host and port only (never the path, query or credentials of
the URL: those may hold a key) and the cause found in the exception's chain: both clients (the
own HTTP/1.1 client and httpx's) raise an httpx exception whose `__cause__` or `__context__`
holds the OS or TLS error underneath (`socket.gaierror`, `ConnectionRefusedError`,
`ssl.SSLError`, `ConnectionResetError`). The `code` stays what it was, so clients that branch
on it keep working; the message is what says why.
"""

from __future__ import annotations

import errno
import socket
import ssl

import httpx

DEFAULT_PORTS = {"http": 80, "https": 443}
_CHAIN_DEPTH = 16  # a chain is a few links; the bound only guards against a cycle


def upstream_origin(url: httpx.URL) -> str:
    """`host:port` of an upstream URL (IPv6 in brackets): what an error may say about it."""
    host = url.host
    if ":" in host:
        host = f"[{host}]"
    port = url.port or DEFAULT_PORTS.get(url.scheme)
    return host if port is None else f"{host}:{port}"


def describe_failure(exc: Exception, upstream: str | None = None) -> tuple[int, str, str]:
    """HTTP status, message and error code for a failure to reach or read the upstream.

    `upstream` is the `host:port` the request went to (`upstream_origin`); without it the
    exception's own request is asked, and failing that the message names no upstream."""
    where = upstream or _origin_of(exc)
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return 504, f"upstream {where} connect timed out", "upstream_timeout"
    if isinstance(exc, httpx.WriteTimeout):
        return 504, f"upstream {where} write timed out", "upstream_timeout"
    if isinstance(exc, httpx.TimeoutException):
        return 504, f"upstream {where} read timed out", "upstream_timeout"
    cause = _cause(exc, where)
    if isinstance(exc, httpx.ConnectError):
        return 502, cause or f"could not connect to upstream {where}", "upstream_unreachable"
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        # The own client's failures say what the upstream did (a head past its limit, a close
        # without an answer and whether the request was sent again) and carry no request data.
        return 502, f"{cause or f'upstream {where}'}: {exc}", code
    if cause:
        return 502, cause, "upstream_failed"
    return 502, f"upstream {where} connection failed: {type(exc).__name__}", "upstream_failed"


def _origin_of(exc: Exception) -> str:
    try:
        request = exc.request  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when none was set
        return "(unknown)"
    return upstream_origin(request.url)


def _cause(exc: BaseException, where: str) -> str | None:
    """Why, in words, from the first OS or TLS error in the chain; None when there is none."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < _CHAIN_DEPTH:
        seen.add(id(link))
        reason = _reason(link, where)
        if reason:
            return reason
        link = link.__cause__ or link.__context__
    return None


def _reason(exc: BaseException, where: str) -> str | None:
    if isinstance(exc, socket.gaierror) or _unresolved(exc):
        return f"upstream name {_host_of(where)} could not be resolved"
    if isinstance(exc, ssl.SSLError):  # before OSError: an SSLError is one
        return f"TLS with upstream {where} failed: {_tls_reason(exc)}"
    if not isinstance(exc, OSError):
        return None
    if exc.errno == errno.ECONNREFUSED:
        return f"upstream {where} refused the connection"
    if exc.errno == errno.ECONNRESET:
        return f"upstream {where} reset the connection"
    if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"upstream {where} is unreachable: {exc.strerror}"
    return None


def _host_of(where: str) -> str:
    if where.startswith("["):
        return where[1 : where.find("]")]
    return where.rsplit(":", 1)[0]


def _unresolved(exc: BaseException) -> bool:
    # happy_eyeballs.race: a name whose lookup succeeded with no TCP address
    return isinstance(exc, OSError) and "resolved to no address" in str(exc)


def _tls_reason(exc: ssl.SSLError) -> str:
    """Say "certificate verify failed: self-signed certificate", or OpenSSL's reason in words."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message
        return f"certificate verify failed: {detail}" if detail else "certificate verify failed"
    if exc.reason:
        return f"handshake failed: {exc.reason.lower().replace('_', ' ')}"
    return f"handshake failed: {exc}"
