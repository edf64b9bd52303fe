"""A closed upstream connection leaves no reference cycle: reference counting frees it.

The proxy freezes long-lived objects out of the cycle collector's reach (proxy/server/
gc_tuning.py), so a cycle among a stream's objects would stay until the rare full collection of
everything. The upstream connection's protocol and its parser (which holds the protocol's
callbacks), and the protocol and its transport, would be two such cycles on every connection
that closes; connection_lost breaks them.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

from proxy.upstream.http1 import Http1Transport
from tests.support.scripted_servers import Peer, Server, fetch_all, get, idle_count, ok
from tests.support.waiting import until


def test_a_connection_the_server_closed_is_freed_by_reference_counting(run) -> None:
    async def handler(peer: Peer) -> None:
        if await peer.read_request() is not None:
            await peer.send(ok())
            await asyncio.sleep(0.05)  # then closes, like a server's own keep-alive timeout

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            assert await fetch_all(transport, get(server.url)) == (200, b"ok")
            [[connection]] = transport._idle.values()
            gone = weakref.ref(connection)
            del connection
            await until(lambda: idle_count(transport) == 0, "the closed one gone", timeout=2.0)
            await until(lambda: gone() is None, "the connection freed", timeout=2.0)

    enabled = gc.isenabled()
    gc.disable()  # only reference counting may free it
    try:
        run(main())
    finally:
        if enabled:
            gc.enable()
