"""The upstream request built by proxy/upstream/outgoing.py is the one httpx builds from
`content=`: same method, URL, fields in the same order, body and extensions."""

from __future__ import annotations

import httpx
import pytest

from proxy.upstream.outgoing import outgoing_request

HEADERS = [
    (b"content-type", b"application/json"),
    (b"X-Title", "Café".encode()),
    (b"authorization", b"Bearer sk-1"),
    (b"accept-encoding", b"identity"),
    (b"x-request-id", b"abc"),
]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "GET", "DELETE", "HEAD", "OPTIONS"])
@pytest.mark.parametrize("content", [b"", b'{"model":"m"}'])
@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/v1/chat/completions", "https://h.example/v1/models?x=1"]
)
def test_it_is_the_request_httpx_builds(method: str, content: bytes, url: str) -> None:
    extensions = {"timeout": {"read": 1.0}}
    expected = httpx.Request(
        method, httpx.URL(url), headers=HEADERS, content=content, extensions=extensions
    )
    built = outgoing_request(method.lower(), httpx.URL(url), HEADERS, content, extensions)
    assert built.method == expected.method
    assert built.url == expected.url
    assert built.headers.raw == expected.headers.raw
    assert built.content == expected.content
    assert built.extensions == expected.extensions
    assert list(built.stream) == list(expected.stream)  # type: ignore[arg-type]
