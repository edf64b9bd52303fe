"""Happy Eyeballs in the own client (proxy/upstream/happy_eyeballs.py, Http1Transport._connect): a
host name's addresses are raced, so a dead first one costs 250 ms rather than the connect timeout.

The loop's resolver (`loop.getaddrinfo`) is replaced by one that gives loopback addresses of
the test's choosing; a dead address is a listener whose accept queue is full, so that its
SYNs go unanswered (tests/support/egress_servers.py `blackhole`). Every test runs under asyncio and
uvloop (uvloop's create_connection has no happy_eyeballs_delay of its own).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import pytest
import trustme

from proxy.upstream import happy_eyeballs
from proxy.upstream.happy_eyeballs import interleave
from proxy.upstream.http1 import Http1Transport
from tests.support.egress_servers import (
    TIMEOUTS,
    Upstream,
    blackhole,
    client_context,
    fetch,
    get,
    refused_port,
    server_context,
)
from tests.support.waiting import until

HOST = "upstream.test"  # never resolved by the system: the tests' resolver answers for it


def tcp(address: tuple[str, int], family: int = socket.AF_INET) -> tuple:
    return (family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)


def resolve_to(*addresses: tuple[str, int]) -> list[str]:
    """From now on the running loop's resolver answers for HOST with `addresses`, in that order,
    and records every host it is asked for; other hosts it resolves as before (uvloop's sock_connect
    resolves its address through it too). The loop is the test's own, discarded after. asyncio's
    create_connection resolves through it as well, uvloop's does not."""
    loop = asyncio.get_running_loop()
    resolve = loop.getaddrinfo
    asked: list[str] = []

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[tuple]:
        asked.append(host)
        if host != HOST:
            return await resolve(host, port, *args, **kwargs)
        return [tcp(address) for address in addresses]

    loop.getaddrinfo = getaddrinfo  # type: ignore[method-assign]
    return asked


def with_connect_timeout(request: httpx.Request, seconds: float) -> httpx.Request:
    request.extensions["timeout"] = {**TIMEOUTS, "connect": seconds}
    return request


def test_a_dead_first_address_costs_the_attempt_delay_not_the_connect_timeout(run) -> None:
    async def main() -> None:
        async with Upstream() as upstream, Http1Transport() as transport:
            with blackhole() as dead:
                resolve_to(dead, ("127.0.0.1", upstream.port))
                started = time.monotonic()
                status, body = await fetch(transport, get(f"http://{HOST}:{upstream.port}/v1"))
                elapsed = time.monotonic() - started
        assert (status, body) == (200, b"GET /v1 HTTP/1.1")
        assert happy_eyeballs.ATTEMPT_DELAY <= elapsed < 1.5  # the connect timeout is 3 s
        assert upstream.connections == 1

    run(main())


def test_a_refused_first_address_moves_on_at_once(run) -> None:
    async def main() -> None:
        async with Upstream() as upstream, Http1Transport() as transport:
            resolve_to(("127.0.0.1", refused_port()), ("127.0.0.1", upstream.port))
            started = time.monotonic()
            status, _ = await fetch(transport, get(f"http://{HOST}:{upstream.port}/"))
            assert status == 200
            # a failed attempt starts the next one without waiting out the attempt delay
            assert time.monotonic() - started < happy_eyeballs.ATTEMPT_DELAY

    run(main())


def test_tls_goes_over_the_winning_socket_and_verifies_the_host_name(run) -> None:
    ca = trustme.CA()

    async def main() -> None:
        async with (
            Upstream(server_context(ca, HOST)) as upstream,
            Http1Transport(ssl_context=client_context(ca)) as transport,
        ):
            with blackhole() as dead:
                resolve_to(dead, ("127.0.0.1", upstream.port))
                status, body = await fetch(transport, get(f"https://{HOST}:{upstream.port}/x"))
            assert (status, body) == (200, b"GET /x HTTP/1.1")
            assert upstream.requests[0].lower().count(f"host: {HOST}:".encode()) == 1

    run(main())


def test_every_address_refused_is_connect_error_naming_each(run) -> None:
    async def main() -> None:
        first, second = refused_port(), refused_port()
        resolve_to(("127.0.0.1", first), ("127.0.0.1", second))
        async with Http1Transport() as transport:
            with pytest.raises(httpx.ConnectError) as caught:
                await fetch(transport, get(f"http://{HOST}:{first}/"))
        message = str(caught.value)
        assert "all 2 addresses failed" in message
        assert str(first) in message and str(second) in message

    run(main())


def test_only_dead_addresses_is_connect_timeout_and_leaves_nothing_behind(run) -> None:
    """Both attempts are cancelled at the connect timeout; the fixture fails the test if either
    left an exception unretrieved."""

    async def main() -> None:
        async with Http1Transport() as transport:
            with blackhole() as dead, blackhole() as dead_too:
                resolve_to(dead, dead_too)
                before = asyncio.all_tasks()
                started = time.monotonic()
                request = with_connect_timeout(get(f"http://{HOST}:{dead[1]}/"), 0.6)
                with pytest.raises(httpx.ConnectTimeout):
                    await fetch(transport, request)
                assert 0.6 <= time.monotonic() - started < 2.0
                await until(lambda: asyncio.all_tasks() <= before, "the attempts ended")
                await asyncio.sleep(0)  # and their done callbacks run

    run(main())


def test_an_ip_literal_is_not_resolved(run) -> None:
    async def main() -> None:
        async with Upstream() as upstream, Http1Transport() as transport:
            asked = resolve_to()
            assert (await fetch(transport, get(upstream.url())))[0] == 200
            assert asked == []

    run(main())


def test_localhost_resolved_by_the_system_reaches_a_server_on_127_0_0_1(run) -> None:
    """The real resolver: localhost may give ::1 first, which nothing here listens on."""

    async def main() -> None:
        async with Upstream() as upstream, Http1Transport() as transport:
            assert (await fetch(transport, get(upstream.url("localhost"))))[0] == 200

    run(main())


def test_interleave_alternates_families_starting_with_the_first() -> None:
    v6 = [tcp((f"::{i}", 443), socket.AF_INET6) for i in (1, 2, 3)]
    v4 = [tcp((f"127.0.0.{i}", 443)) for i in (1, 2)]
    assert interleave([*v6, *v4]) == [v6[0], v4[0], v6[1], v4[1], v6[2]]
    assert interleave([v4[0], *v6]) == [v4[0], v6[0], v6[1], v6[2]]
    assert interleave([]) == []
