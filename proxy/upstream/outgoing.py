"""The request that goes upstream, as httpx would build it from `content=`, built cheaper.

`httpx.Request(..., content=...)` parses the URL again, builds its headers twice, computes the
headers' encoding to look for a multipart boundary a byte body never has, and merges Host and
Content-Length in by name: about 15 µs a request, a third of the raw TCP relay's whole round
trip. Here the same fields, in the same order, go in once: Host first, the forwarded headers,
then Content-Length (or `Content-Length: 0` right after Host for an empty POST, PUT or PATCH,
where httpx puts it), and the body is already read.
"""

from __future__ import annotations

from typing import Any

import httpx

from proxy.upstream.headers import RawHeaders

_EMPTY_BODY_SAYS_ZERO = frozenset({"POST", "PUT", "PATCH"})


def outgoing_request(
    method: str, url: httpx.URL, headers: RawHeaders, content: bytes, extensions: dict[str, Any]
) -> httpx.Request:
    """What `httpx.Request(method, url, headers=headers, content=content,
    extensions=extensions)` builds, for `headers` without Host, Content-Length or
    Transfer-Encoding (`request_headers` drops them)."""
    method = method.upper()
    fields: RawHeaders = [(b"Host", url.netloc)] if url.host else []
    if content:
        fields += headers
        fields.append((b"Content-Length", b"%d" % len(content)))
    else:
        if method in _EMPTY_BODY_SAYS_ZERO:
            fields.append((b"Content-Length", b"0"))
        fields += headers
    request = httpx.Request(
        method, url, headers=fields, stream=httpx.ByteStream(content), extensions=extensions
    )
    request.read()  # the body is bytes already: no stream left to read
    return request
