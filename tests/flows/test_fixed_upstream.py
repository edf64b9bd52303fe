"""The upstream is fixed by configuration, over real sockets: no client header (Host, forwarding
headers) or request target redirects the proxy elsewhere, and client paths stay under the
configured base path.

Every server is on 127.0.0.1. `evil.example` is only ever a header value: the reserved
`.example` TLD does not resolve, and a proxy that tried would answer 502, which the tests catch.
Each test says in a comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx
import orjson
import pytest

from tests.support.chat_requests import chat
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy

TIMEOUT = httpx.Timeout(10.0)


def raw_http(url: str, request: bytes) -> bytes:
    """Send `request` as-is to the server at `url`; the whole response (connection: close)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


REDIRECTING_HEADERS = [
    {"host": "evil.example"},
    {"host": "EVIL"},
    {"x-forwarded-host": "EVIL", "x-forwarded-proto": "http", "x-forwarded-port": "PORT"},
    {"x-forwarded-host": "evil.example", "x-forwarded-proto": "https"},
    {"forwarded": "for=192.0.2.1;host=EVIL;proto=http"},
    {"x-original-url": "http://EVIL/v1/models", "x-rewrite-url": "http://EVIL/v1/models"},
    {"x-forwarded-server": "EVIL", "x-host": "EVIL", "x-forwarded-prefix": "//EVIL/v1"},
]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", chat("gemini_indexless_call_stop", stream=True)),
        ("POST", "/v1/chat/completions", chat("gemini_indexless_call_stop")),
        ("GET", "/v1/models", None),
    ],
    ids=["stream", "json", "passthrough"],
)
def test_no_client_header_or_request_target_redirects_the_proxy(
    method: str, path: str, body: dict[str, Any] | None
) -> None:
    # Without a base URL fixed by configuration (a proxy that built the upstream URL from the
    # request's Host, X-Forwarded-*/Forwarded, or the absolute-form target), these requests
    # would reach the "evil" upstream (also a loopback fake, so a redirect is observable) or
    # fail resolving evil.example with a 502.
    with (
        running_fake_upstream() as (good, good_root),
        running_fake_upstream() as (evil, evil_root),
        running_proxy(f"{good_root}/v1") as proxy,
    ):
        evil_host = evil_root.removeprefix("http://")
        good_host = good_root.removeprefix("http://")
        content = orjson.dumps(body) if body is not None else b""
        for template in REDIRECTING_HEADERS:
            headers = {
                name: value.replace("EVIL", evil_host).replace("PORT", evil_host.split(":")[1])
                for name, value in template.items()
            }
            before = len(good.requests)
            response = httpx.request(
                method,
                f"{proxy}{path}",
                content=content or None,
                headers=headers,
                timeout=TIMEOUT,
            )
            assert response.status_code == 200, (headers, response.text)
            assert len(good.requests) == before + 1, headers
            assert good.requests[-1].path == path, headers
            assert good.requests[-1].headers["host"] == good_host, headers

        # The absolute form (RFC 9112 §3.2.2), as a forward proxy would be asked.
        request = (
            f"{method} http://{evil_host}{path} HTTP/1.1\r\n"
            f"host: {evil_host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(content)}\r\nconnection: close\r\n\r\n"
        ).encode() + content
        before = len(good.requests)
        answer = raw_http(proxy, request)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert len(good.requests) == before + 1
        assert good.requests[-1].path == path
        assert good.requests[-1].headers["host"] == good_host
        assert evil.requests == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/%2E%2E/%2E%2E/v1/models",
        "/v1/..%2F..%2Fv1%2Fmodels",
        "/v1/%2e%2e%2f%2e%2e%2fv1%2fmodels",
        "/v1/models/..%2F..%2F..%2Fv1%2Fmodels",
    ],
)
def test_client_paths_stay_under_the_configured_base_path(path: str) -> None:
    # `/v1/{path}` is appended to the base URL; `..` segments, percent-encoded so the client's
    # own HTTP library sends them as they are, are decoded by the router and then resolved by
    # httpx, so the request leaves the base path for any path on that host (with a route's
    # own key, when the route holds one). Expected: refused (4xx), or sent under the base path.
    with (
        running_fake_upstream() as (fake, root),
        running_proxy(f"{root}/v1beta/openai") as proxy,
    ):
        response = httpx.get(f"{proxy}{path}", timeout=TIMEOUT)
        if fake.requests:
            assert fake.requests[-1].path.startswith("/v1beta/openai/"), fake.requests[-1].path
        else:
            assert 400 <= response.status_code < 500
