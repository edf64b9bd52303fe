"""The store the settings name (`[receipts] store` and its `redis_*` keys), with the
Redis credentials from the environment: secrets never become settings, so they are never
printed by `streamfix config` or written into a config file.

- STREAMFIX_REDIS_USERNAME, STREAMFIX_REDIS_PASSWORD: Redis's ACL user and password (or the
  `requirepass` password alone); they win over any in the URL.
- STREAMFIX_REDIS_SENTINEL_USERNAME, STREAMFIX_REDIS_SENTINEL_PASSWORD: the sentinels' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from proxy.store.memory_store import MemoryStore
from proxy.store.protocol import Store
from proxy.store.redis_connection import RedisOptions
from proxy.store.redis_store import RedisStore
from proxy.wire.config_values import ConfigError

CREDENTIALS = {
    "username": "STREAMFIX_REDIS_USERNAME",
    "password": "STREAMFIX_REDIS_PASSWORD",
    "sentinel_username": "STREAMFIX_REDIS_SENTINEL_USERNAME",
    "sentinel_password": "STREAMFIX_REDIS_SENTINEL_PASSWORD",
}


class StoreSettings(Protocol):
    """What opening a store reads of the settings' `[receipts]` table (`ReceiptSettings`)."""

    @property
    def store(self) -> str: ...
    @property
    def max_entries(self) -> int: ...
    @property
    def ttl_seconds(self) -> float: ...
    @property
    def max_total_bytes(self) -> int: ...
    @property
    def redis_timeout_seconds(self) -> float: ...
    @property
    def redis_tls_ca_file(self) -> str: ...
    @property
    def redis_tls_cert_file(self) -> str: ...
    @property
    def redis_tls_key_file(self) -> str: ...
    @property
    def redis_tls_verify(self) -> str: ...
    @property
    def redis_sentinels(self) -> tuple[str, ...]: ...
    @property
    def redis_service_name(self) -> str: ...
    @property
    def redis_cluster(self) -> bool: ...


def open_store(settings: StoreSettings, environ: Mapping[str, str] | None = None) -> Store:
    if settings.store == "memory":
        return MemoryStore(
            settings.max_entries, settings.ttl_seconds, max_total_bytes=settings.max_total_bytes
        )
    return RedisStore.open(redis_options(settings, environ or {}), settings.ttl_seconds)


def redis_options(settings: StoreSettings, environ: Mapping[str, str]) -> RedisOptions:
    secrets = {name: environ.get(variable) or None for name, variable in CREDENTIALS.items()}
    return RedisOptions(
        url=settings.store,
        timeout_seconds=settings.redis_timeout_seconds,
        tls_ca_file=settings.redis_tls_ca_file,
        tls_cert_file=settings.redis_tls_cert_file,
        tls_key_file=settings.redis_tls_key_file,
        tls_verify=settings.redis_tls_verify,
        sentinels=tuple(host_and_port(entry) for entry in settings.redis_sentinels),
        service_name=settings.redis_service_name,
        cluster=settings.redis_cluster,
        **secrets,
    )


def host_and_port(entry: str) -> tuple[str, int]:
    """`host:port` (`[v6::addr]:port` too) as a pair; the port defaults to Sentinel's 26379."""
    host, colon, port = entry.strip().rpartition(":")
    if not colon or "]" in port:
        return entry.strip().strip("[]"), 26379
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ConfigError(f"redis_sentinels: {entry!r} is not host:port")
    return host.strip("[]"), int(port)
