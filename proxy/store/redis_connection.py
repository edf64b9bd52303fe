"""How the proxy reaches Redis as it runs in production: one server (`redis://`, `rediss://`
with TLS), a Sentinel-managed master, or a Redis Cluster, always through redis-py's own
clients, with credentials from the environment and every wait bounded.

`RedisConnection` is the one pool of connections of a process, shared by every store on it
(receipts and the Responses front's state under `streamfix:`, learned rules under
`streamfix:learned:`), and so is its `StoreHealth`: an outage is one outage, logged once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from proxy.store.health import StoreHealth
from proxy.wire.credentials import masked_url

TLS_VERIFY_MODES = ("full", "ca", "none")
"""`full`: the server's certificate must chain to the CA and name the host; `ca`: it must chain
to the CA (a certificate issued for another name, as some managed services hand out); `none`:
encrypted, unverified (a test rig only)."""

_CERT_REQUIREMENTS = {
    "full": ("required", True),
    "ca": ("required", False),
    "none": ("none", False),
}


@dataclass(frozen=True, slots=True, repr=False)
class RedisOptions:
    """Where Redis is and how to talk to it; secrets (the environment's, the URL's) never
    printed: its repr is `shown`."""

    url: str
    timeout_seconds: float = 0.5
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_verify: str = "full"
    sentinels: tuple[tuple[str, int], ...] = ()
    service_name: str = ""
    cluster: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    def __repr__(self) -> str:
        return f"RedisOptions({self.shown})"

    @property
    def tls(self) -> bool:
        return self.url.lower().startswith("rediss://")

    @property
    def shown(self) -> str:
        """The deployment in words fit for a log line: the URL masked, the topology named."""
        url = masked_url(self.url)
        if self.sentinels:
            where = ",".join(f"{host}:{port}" for host, port in self.sentinels)
            return f"{url} (sentinel service {self.service_name} via {where})"
        return f"{url} (cluster)" if self.cluster else url

    @property
    def deadline_seconds(self) -> float:
        """A whole store operation's bound: a connection and a command, or Sentinel's lookup of
        the master and Cluster's of its slots before one, each within `timeout_seconds`."""
        return 2 * self.timeout_seconds


def redis_client(options: RedisOptions, *, sync: bool = False) -> tuple[Any, list[Any]]:
    """redis-py's client for the deployment (asyncio's unless `sync`), and the clients it made
    to get there (Sentinel's), which need closing with it."""
    if sync:
        import redis as library
        from redis.cluster import RedisCluster
        from redis.retry import Retry
        from redis.sentinel import Sentinel
    else:
        import redis.asyncio as library  # type: ignore[no-redef]
        from redis.asyncio.cluster import RedisCluster  # type: ignore[assignment]
        from redis.asyncio.retry import Retry  # type: ignore[assignment]
        from redis.asyncio.sentinel import Sentinel  # type: ignore[assignment]
    from redis.backoff import NoBackoff

    # One immediate retry on a broken connection: a pooled connection that died while idle
    # (Redis restarted, a failover) is replaced at once. A timeout is not retried: the
    # operation has cost its wait already, and the exchange goes on without it.
    retry = Retry(NoBackoff(), 1, supported_errors=(library.ConnectionError,))
    kwargs = _connection_kwargs(options)
    if options.cluster:
        return RedisCluster.from_url(_without_credentials(options), retry=retry, **kwargs), []
    if options.sentinels:
        sentinel = Sentinel(options.sentinels, sentinel_kwargs=_sentinel_kwargs(options), **kwargs)
        client = sentinel.master_for(
            options.service_name, db=_database(options.url), ssl=options.tls, retry=retry
        )
        return client, list(sentinel.sentinels)
    return library.Redis.from_url(_without_credentials(options), retry=retry, **kwargs), []


def _connection_kwargs(options: RedisOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "socket_timeout": options.timeout_seconds,
        "socket_connect_timeout": options.timeout_seconds,
        "health_check_interval": 0,
    }
    if options.username is not None:
        kwargs["username"] = options.username
    if options.password is not None:
        kwargs["password"] = options.password
    return kwargs | _tls_kwargs(options)


def _tls_kwargs(options: RedisOptions) -> dict[str, Any]:
    if not options.tls:
        return {}
    requirement, check_hostname = _CERT_REQUIREMENTS[options.tls_verify]
    kwargs: dict[str, Any] = {
        "ssl_cert_reqs": requirement,
        "ssl_check_hostname": check_hostname,
    }
    if options.tls_ca_file:
        kwargs["ssl_ca_certs"] = options.tls_ca_file
    if options.tls_cert_file:
        kwargs["ssl_certfile"] = options.tls_cert_file
        kwargs["ssl_keyfile"] = options.tls_key_file or None
    return kwargs


def _sentinel_kwargs(options: RedisOptions) -> dict[str, Any]:
    """The sentinels are asked with the same timeouts and TLS as the master, and their own
    credentials (a Sentinel's `requirepass` is its own)."""
    kwargs: dict[str, Any] = {
        "socket_timeout": options.timeout_seconds,
        "socket_connect_timeout": options.timeout_seconds,
    }
    if options.tls:
        kwargs["ssl"] = True
        kwargs |= _tls_kwargs(options)
    if options.sentinel_username is not None:
        kwargs["username"] = options.sentinel_username
    if options.sentinel_password is not None:
        kwargs["password"] = options.sentinel_password
    return kwargs


def _without_credentials(options: RedisOptions) -> str:
    """The URL for redis-py, whose URL credentials would win over the environment's."""
    if options.username is None and options.password is None:
        return options.url
    parts = urlsplit(options.url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _database(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0


class RedisConnection:
    """One redis-py client and the health of what it reaches, shared by the stores on it and
    closed when the last of them closes."""

    def __init__(self, options: RedisOptions) -> None:
        import redis
        import redis.exceptions

        self.options = options
        self.client, self._helpers = redis_client(options)
        self.health = StoreHealth(options.shown)
        self.failures: tuple[type[BaseException], ...] = (
            redis.RedisError,
            redis.exceptions.RedisClusterException,
            OSError,
            TimeoutError,  # the operation's deadline (asyncio.timeout raises the builtin)
        )
        self.timeouts: tuple[type[BaseException], ...] = (redis.TimeoutError, TimeoutError)
        self._users = 0

    def use(self) -> RedisConnection:
        self._users += 1
        return self

    async def read(self, keys: list[str]) -> list[bytes | None]:
        """MGET. On a cluster the keys are grouped by slot first: the keys of one lookup share
        a hash tag, so that is one MGET on one node, but a lookup that did not still works."""
        async with asyncio.timeout(self.options.deadline_seconds):
            if self.options.cluster:
                values = await self.client.mget_nonatomic(keys)
            else:
                values = await self.client.mget(keys)
        return list(values)

    async def write(self, items: dict[str, bytes], ttl_seconds: int) -> None:
        async with asyncio.timeout(self.options.deadline_seconds):
            # Not a transaction: each key stands alone, and a cluster pipeline sends each
            # slot's commands to its own node.
            async with self.client.pipeline(transaction=False) as pipe:
                for key, value in items.items():
                    pipe.set(key, value, ex=ttl_seconds)
                await pipe.execute()

    async def ping(self) -> bool:
        async with asyncio.timeout(self.options.deadline_seconds):
            return bool(await self.client.ping())

    async def release(self) -> None:
        self._users -= 1
        if self._users > 0:
            return
        await self.client.aclose()
        for helper in self._helpers:
            await helper.aclose()
