"""The live upstream connection pool: the proxy's own HTTP/1.1 client, or httpx's."""

from __future__ import annotations

import itertools

import httpx

from proxy.http1 import KEEPALIVE_EXPIRY, Http1Transport
from proxy.settings import ServerSettings

SHARDS = 16
KEEPALIVE_PER_SHARD = 16


class ShardedTransport(httpx.AsyncBaseTransport):
    """Several small httpcore pools instead of one large one (`upstream_client = "httpx"`).

    httpcore's pool does work proportional to all its connections on every request
    (encode/httpcore#1035): with 200 pooled connections a request cost ~11 ms of CPU and the
    soak's throughput collapsed for seconds at a time. Round-robin over small pools keeps that
    cost bounded by the shard size while still reusing connections.
    """

    def __init__(self, shards: int = SHARDS, keepalive_per_shard: int = KEEPALIVE_PER_SHARD):
        limits = httpx.Limits(
            max_connections=None,
            max_keepalive_connections=keepalive_per_shard,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        )
        self._shards = [httpx.AsyncHTTPTransport(limits=limits) for _ in range(shards)]
        self._next = itertools.cycle(self._shards)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await next(self._next).handle_async_request(request)

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


def live_transport(server: ServerSettings) -> httpx.AsyncBaseTransport:
    if server.upstream_client == "httpx":
        return ShardedTransport()
    return Http1Transport()
