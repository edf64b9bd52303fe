"""The transport that carries every upstream request, chosen in one place (`upstream_transport`):
cassettes replayed, the live pool recorded, or the live pool itself: the proxy's own HTTP/1.1
client, or httpx's, behind the egress proxies the environment names (proxy/upstream/egress.py)."""

from __future__ import annotations

import itertools
import os
import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path

import httpx

from proxy.settings.schema import ServerSettings, Settings
from proxy.upstream.egress import EgressRules, EgressTransport
from proxy.upstream.http1 import KEEPALIVE_EXPIRY, Http1Transport
from proxy.upstream.recording import RecordingTransport, ReplayTransport

SHARDS = 16
KEEPALIVE_PER_SHARD = 16


def upstream_transport(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> httpx.AsyncBaseTransport:
    """What the settings choose: `recording.replay_dir` replays its cassettes with no network;
    `recording.record_dir` records around the live transport; otherwise the live transport,
    behind the egress proxies of `environ` (os.environ by default)."""
    recording = settings.recording
    if recording.replay_dir:
        return ReplayTransport.from_directory(
            Path(recording.replay_dir), settings.upstream.base_url, recording.replay_timing
        )
    live = live_transport(settings.server, environ, base_urls=upstream_base_urls(settings))
    if not recording.record_dir:
        return live
    secret = frozenset(name.lower() for name in recording.secret_headers)
    return RecordingTransport(live, Path(recording.record_dir), settings.upstream.base_url, secret)


class ShardedTransport(httpx.AsyncBaseTransport):
    """Several small httpcore pools instead of one large one (`upstream_client = "httpx"`).

    httpcore's pool does work proportional to all its connections on every request
    (encode/httpcore#1035): with 200 pooled connections a request cost ~11 ms of CPU and the
    soak's throughput collapsed for seconds at a time. Round-robin over small pools keeps that
    cost bounded by the shard size while still reusing connections.
    """

    def __init__(
        self,
        shards: int = SHARDS,
        keepalive_per_shard: int = KEEPALIVE_PER_SHARD,
        ssl_context: ssl.SSLContext | None = None,
    ):
        limits = httpx.Limits(
            max_connections=None,
            max_keepalive_connections=keepalive_per_shard,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        )
        # One context for every shard: each would otherwise load the CA bundle on its own
        # (about 1 MiB and 20 ms apiece).
        context = ssl_context or httpx.create_ssl_context()
        self._shards = [
            httpx.AsyncHTTPTransport(limits=limits, verify=context) for _ in range(shards)
        ]
        self._next = itertools.cycle(self._shards)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await next(self._next).handle_async_request(request)

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


def live_transport(
    server: ServerSettings,
    environ: Mapping[str, str] | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    base_urls: Iterable[str] = (),
) -> httpx.AsyncBaseTransport:
    """The client the settings choose; behind the egress proxies of `environ` (os.environ by
    default) unless `server.trust_env` is false. `ssl_context` verifies upstreams (None: httpx's
    default, certifi's roots); `base_urls` are the configured upstreams, whose routes are
    logged at start-up."""
    direct = _direct_transport(server, ssl_context)
    if not server.trust_env:
        return direct
    rules = EgressRules.from_environ(os.environ if environ is None else environ)
    if not rules.proxies:
        return direct  # the common case pays nothing for the routing
    transport = EgressTransport(direct, rules, ssl_context)
    transport.announce(base_urls)
    return transport


def _direct_transport(
    server: ServerSettings, ssl_context: ssl.SSLContext | None
) -> httpx.AsyncBaseTransport:
    if server.upstream_client == "httpx":
        return ShardedTransport(ssl_context=ssl_context)
    return Http1Transport(
        ssl_context=ssl_context,
        max_head_bytes=server.upstream_max_head_bytes,
        max_fields=server.upstream_max_fields,
        max_line_bytes=server.upstream_max_line_bytes,
    )


def upstream_base_urls(settings: Settings) -> list[str]:
    """Every configured upstream, so start-up can say which goes through an egress proxy."""
    return [settings.upstream.base_url, *(route.base_url for route in settings.routes)]
