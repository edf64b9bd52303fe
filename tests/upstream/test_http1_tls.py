"""The upstream HTTP/1.1 client over TLS, driven directly: a request succeeds and its connection
is reused, a close-delimited body ends at the close, and a certificate for another host or from
an unknown CA is a connect error. The CA is a throwaway one (the `ca` fixture, tests/conftest.py).

Every test runs once per event loop (the `run` fixture, tests/support/loops.py) against small
scripted asyncio servers (tests/support/scripted_servers.py).
"""

from __future__ import annotations

import httpx
import pytest

from proxy.upstream.http1 import Http1Transport
from tests.support.loops import LOOPS, client_context, server_context  # noqa: F401
from tests.support.scripted_servers import (
    Peer,
    Server,
    answer,
    fetch,
    fetch_all,
    get,
    ok,
)


def test_tls_request_succeeds_and_its_connection_is_reused(run, ca) -> None:
    async def main() -> None:
        async with (
            Server(answer(ok(b"secret")), server_context(ca, "127.0.0.1")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            for _ in range(2):
                assert await fetch_all(transport, get(server.url + "/v1")) == (200, b"secret")
            assert len(server.peers) == 1
            assert server.peers[0].requests[1].startswith(b"GET /v1 HTTP/1.1\r\n")

    run(main())


def test_tls_close_delimited_body_ends_at_the_close(run, ca) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")

    async def main() -> None:
        async with (
            Server(handler, server_context(ca, "127.0.0.1")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            assert await fetch_all(transport, get(server.url)) == (200, b"all of it")

    run(main())


def test_tls_certificate_for_another_host_is_connect_error(run, ca) -> None:
    async def main() -> None:
        async with (
            Server(answer(ok()), server_context(ca, "upstream.example")) as server,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await fetch(transport, get(server.url))
            assert all(peer.requests == [] for peer in server.peers)

    run(main())


def test_tls_without_the_test_ca_is_connect_error(run, ca) -> None:
    """The default context (httpx's, certifi's roots) does not trust the throwaway CA."""

    async def main() -> None:
        async with (
            Server(answer(ok()), server_context(ca, "127.0.0.1")) as server,
            Http1Transport() as transport,
        ):
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await fetch(transport, get(server.url))

    run(main())
