"""Opening the store the settings name, with Redis's credentials from the environment: they
reach Redis (and win over the URL's), and nothing that prints the options shows them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from proxy.settings.schema import ReceiptSettings
from proxy.store.memory_store import MemoryStore
from proxy.store.opening import open_store, redis_options
from proxy.store.redis_store import RedisStore
from tests.support.redis_server import RedisServer, ensure_redis_server

PASSWORD = "right-horse-battery-5c1"


class PasswordRedis(RedisServer):
    def command(self, binary: str) -> list[str]:
        return [*super().command(binary), "--requirepass", PASSWORD]

    def ready(self) -> bool:
        try:
            with redis.Redis(port=self.port, password=PASSWORD, socket_timeout=1) as client:
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False


@pytest.fixture(scope="module")
def password_redis() -> Iterator[PasswordRedis]:
    ensure_redis_server()
    server = PasswordRedis()
    try:
        server.start()
        yield server
    finally:
        server.close()


async def test_the_password_from_the_environment_wins_over_the_urls(
    password_redis: PasswordRedis,
) -> None:
    url = f"redis://:stale-url-password@127.0.0.1:{password_redis.port}/0"
    settings = ReceiptSettings(store=url)
    with_env = open_store(settings, {"STREAMFIX_REDIS_PASSWORD": PASSWORD})
    url_only = open_store(settings, {})
    try:
        assert isinstance(with_env, RedisStore)
        assert await with_env.ping() is True
        assert await with_env.put_many({"{t:u}:k": {"v": 1}}) is True
        assert await url_only.ping() is False  # the URL's password is wrong: the env's won
    finally:
        await with_env.aclose()
        await url_only.aclose()


def test_credentials_are_read_from_the_environment_and_never_shown() -> None:
    env = {
        "STREAMFIX_REDIS_USERNAME": "streamfix",
        "STREAMFIX_REDIS_PASSWORD": PASSWORD,
        "STREAMFIX_REDIS_SENTINEL_PASSWORD": "sentinel-" + PASSWORD,
        "STREAMFIX_REDIS_SENTINEL_USERNAME": "",  # empty is unset
    }
    settings = ReceiptSettings(
        store="rediss://:url-secret@redis.internal:6380/0",
        redis_sentinels=("10.0.0.1:26379", "sentinel-b"),
        redis_service_name="mymaster",
    )
    options = redis_options(settings, env)
    assert (options.username, options.password) == ("streamfix", PASSWORD)
    assert options.sentinel_password == "sentinel-" + PASSWORD
    assert options.sentinel_username is None
    assert options.sentinels == (("10.0.0.1", 26379), ("sentinel-b", 26379))
    for shown in (repr(options), options.shown):
        assert PASSWORD not in shown and "url-secret" not in shown
    assert options.shown == (
        "rediss://****@redis.internal:6380/0 (sentinel service mymaster via "
        "10.0.0.1:26379,sentinel-b:26379)"
    )


def test_memory_is_the_default() -> None:
    assert isinstance(open_store(ReceiptSettings()), MemoryStore)
