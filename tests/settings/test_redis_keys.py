"""The `[receipts]` keys that say how to reach Redis: checked at start-up, so a TLS file with a
plain `redis://` URL (which would send everything in clear text) or a half-configured Sentinel
stops the proxy with a message naming the key."""

from __future__ import annotations

import pytest

from proxy.settings.schema import Settings
from proxy.settings.values import ConfigError


def receipts(**values: object) -> Settings:
    return Settings().with_values({f"receipts.{k}": v for k, v in values.items()}, text=False)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"store": "redis://r:6379/0", "redis_tls_ca_file": "/ca.pem"},
            "TLS files need a rediss:// store URL",
        ),
        (
            {"store": "rediss://r:6379/0", "redis_tls_key_file": "/k.pem"},
            "redis_tls_key_file: needs redis_tls_cert_file",
        ),
        ({"store": "rediss://r/0", "redis_tls_verify": "maybe"}, "redis_tls_verify"),
        (
            {"store": "redis:///0", "redis_sentinels": ["s:26379"], "redis_cluster": True},
            "cannot be used with redis_cluster",
        ),
        ({"store": "redis:///0", "redis_sentinels": ["s:26379"]}, "redis_service_name"),
        ({"store": "redis:///0", "redis_service_name": "m"}, "redis_service_name"),
        (
            {"store": "redis:///0", "redis_sentinels": ["s:port"], "redis_service_name": "m"},
            "'s:port' is not host:port",
        ),
        ({"redis_cluster": True}, "need a redis:// store URL"),
        ({"store": "redis://node:6379/2", "redis_cluster": True}, "database 0 only"),
        ({"store": "redis://r/0", "redis_timeout_seconds": 0}, "must be positive"),
    ],
)
def test_a_redis_option_the_store_cannot_use_is_refused(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=r"receipts\.redis") as refused:
        receipts(**values)
    assert message in str(refused.value)


def test_every_deployment_form_is_accepted() -> None:
    tls = receipts(
        store="rediss://r:6380/0",
        redis_tls_ca_file="/ca.pem",
        redis_tls_cert_file="/c.pem",
        redis_tls_key_file="/k.pem",
        redis_tls_verify="ca",
    )
    assert tls.receipts.redis_tls_verify == "ca"
    sentinel = receipts(
        store="redis:///0",
        redis_sentinels=["10.0.0.1:26379", "sentinel-b", "[::1]:26380"],
        redis_service_name="mymaster",
    )
    assert sentinel.receipts.redis_sentinels == ("10.0.0.1:26379", "sentinel-b", "[::1]:26380")
    assert receipts(store="redis://node:6379", redis_cluster=True).receipts.redis_cluster


def test_replicas_are_declared_in_the_environment() -> None:
    settings = Settings.load(None, {"STREAMFIX_REPLICAS": "3"})
    assert settings.server.replicas == 3
