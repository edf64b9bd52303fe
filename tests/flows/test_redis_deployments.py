"""Redis as production runs it, under two `python -m proxy serve` replicas: TLS with client
certificates and an ACL user whose password comes from the environment, Sentinel (followed
through a failover in the middle of a conversation), and Redis Cluster (a request's keys in one
slot; `streamfix config` reading what the cluster learned). Each conversation sends every
request to the other replica, and the fake upstream refuses a follow-up without its receipt.

The deployments are started by the tests (tests/support/redis_deployments.py), one per module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from proxy.store.redis_connection import RedisOptions
from proxy.store.redis_store import RedisStore
from tests.support.proxy_process import run_cli
from tests.support.reasoning_flows import FINAL_TEXTS
from tests.support.reasoning_upstreams import DeepSeekUpstream, running_deepseek_upstream
from tests.support.redis_deployments import (
    ACL_PASSWORD,
    ACL_USER,
    SERVICE_NAME,
    ClusterRedis,
    SentinelRedis,
    TlsRedis,
    running_cluster,
    running_sentinel,
)
from tests.support.rejecting_upstream import (
    RejectingUpstream,
    groq_unsupported,
    running_rejecting_upstream,
)
from tests.support.replicas import replica_config, round_robin_chat, running_replicas, scraped
from tests.support.waiting import wait_until

MODEL = "deepseek-v4-flash"
CREDENTIALS = {"STREAMFIX_REDIS_USERNAME": ACL_USER, "STREAMFIX_REDIS_PASSWORD": ACL_PASSWORD}


@pytest.fixture(scope="module")
def deepseek() -> Iterator[tuple[DeepSeekUpstream, list[dict[str, Any]]]]:
    refusing = RejectingUpstream({"store": groq_unsupported("store", "stop")})
    with (
        running_deepseek_upstream() as (fake, root),
        running_rejecting_upstream(refusing) as refusing_url,
    ):
        deepseek_route = {"models": ["deepseek-*"], "base_url": f"{root}/v1", "profile": "deepseek"}
        routes = [
            {"name": "deepseek", **deepseek_route},
            {"name": "refusing", "models": ["refusing"], "base_url": refusing_url},
        ]
        yield fake, routes


@pytest.fixture(scope="module")
def tls_redis() -> Iterator[TlsRedis]:
    server = TlsRedis()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def sentinel() -> Iterator[SentinelRedis]:
    with running_sentinel() as deployment:
        yield deployment


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterRedis]:
    with running_cluster() as deployment:
        yield deployment


def tls_receipts(server: TlsRedis) -> dict[str, Any]:
    files = server.files
    return {
        "store": server.url,
        "redis_tls_ca_file": str(files.ca),
        "redis_tls_cert_file": str(files.client_cert),
        "redis_tls_key_file": str(files.client_key),
    }


# ── TLS and ACL ──────────────────────────────────────────────────────────────


def test_tls_with_client_certificates_and_an_acl_user_from_the_environment(
    tls_redis: TlsRedis, deepseek: tuple[DeepSeekUpstream, list[dict[str, Any]]], tmp_path: Path
) -> None:
    fake, routes = deepseek
    config = replica_config(tmp_path / "streamfix.toml", tls_receipts(tls_redis), routes)
    with running_replicas(config, env=CREDENTIALS) as replicas:
        urls = [replica.url for replica in replicas]
        assert round_robin_chat(urls, MODEL, "stream", "sk-tls") == FINAL_TEXTS
        assert fake.rejections == []
        for replica in replicas:
            ready = httpx.get(f"{replica.url}/readyz", timeout=5)
            assert ready.status_code == 200 and ready.json()["store"] is True
            assert scraped(replica.url, "streamfix_store_errors_total") == 0
    for replica in replicas:
        assert ACL_PASSWORD not in replica.output  # never logged
        assert f"store rediss://127.0.0.1:{tls_redis.port}/0" in replica.output
    with tls_redis.client() as client:
        keys = list(client.scan_iter(match="streamfix:{*"))
    assert keys, "no receipt reached Redis over TLS"


@pytest.mark.parametrize(
    ("change", "env"),
    [
        ({}, {**CREDENTIALS, "STREAMFIX_REDIS_PASSWORD": "not-the-password"}),
        ({"redis_tls_cert_file": "", "redis_tls_key_file": ""}, CREDENTIALS),  # no client cert
        ({"redis_tls_ca_file": ""}, CREDENTIALS),  # Redis's CA is not the system's
    ],
    ids=["wrong-password", "no-client-certificate", "unknown-ca"],
)
def test_a_refused_tls_or_acl_login_is_an_outage_never_a_failed_request(
    tls_redis: TlsRedis,
    deepseek: tuple[DeepSeekUpstream, list[dict[str, Any]]],
    tmp_path: Path,
    change: dict[str, Any],
    env: dict[str, str],
) -> None:
    _, routes = deepseek
    receipts = {**tls_receipts(tls_redis), **change}
    config = replica_config(tmp_path / "streamfix.toml", receipts, routes)
    with running_replicas(config, count=1, env=env) as (replica,):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        headers = {"authorization": "Bearer sk-tls-refused"}
        for _ in range(3):
            answered = httpx.post(f"{replica.url}/v1/chat/completions", json=body, headers=headers)
            assert answered.status_code == 200, answered.text
        ready = httpx.get(f"{replica.url}/readyz", timeout=5)
        assert ready.status_code == 200 and ready.json()["store"] is False
        assert scraped(replica.url, "streamfix_store_up") == 0
        assert scraped(replica.url, "streamfix_store_errors_total") > 0
    assert replica.output.count("does not answer") == 1, replica.output
    assert "not-the-password" not in replica.output


# ── Sentinel ─────────────────────────────────────────────────────────────────


def test_sentinel_finds_the_master_and_follows_a_failover_mid_conversation(
    sentinel: SentinelRedis,
    deepseek: tuple[DeepSeekUpstream, list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    fake, routes = deepseek
    receipts = {
        "store": "redis:///0",
        "redis_sentinels": sentinel.sentinels,
        "redis_service_name": SERVICE_NAME,
    }
    config = replica_config(tmp_path / "streamfix.toml", receipts, routes)
    old_master = sentinel.master_port()
    keys_at_failover: list[int] = []

    def fail_over_after_the_second(sent: int) -> None:
        if sent != 2:
            return
        with (
            redis.Redis(port=old_master) as master,
            redis.Redis(port=sentinel.replica.port) as replica,
        ):
            # Replicated before the switch, as a healthy replica is when it is promoted.
            wait_until(lambda: replica.dbsize() == master.dbsize(), "the replica to catch up")
            keys_at_failover.append(master.dbsize())
        sentinel.failover()

    with running_replicas(config) as replicas:
        urls = [replica.url for replica in replicas]
        finals = round_robin_chat(urls, MODEL, "create", "sk-sentinel", fail_over_after_the_second)
        assert finals == FINAL_TEXTS
        assert fake.rejections == []
    assert sentinel.master_port() != old_master
    with sentinel.master_client() as master:  # the later turns' receipts: on the new master
        assert master.dbsize() > keys_at_failover[0] > 0
    for replica in replicas:
        assert f"(sentinel service {SERVICE_NAME} via 127.0.0.1:" in replica.output


# ── Cluster ──────────────────────────────────────────────────────────────────


def test_cluster_keeps_each_requests_keys_in_one_slot_and_serves_replicas(
    cluster: ClusterRedis,
    deepseek: tuple[DeepSeekUpstream, list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    fake, routes = deepseek
    receipts = {"store": cluster.url, "redis_cluster": True}
    config = replica_config(tmp_path / "streamfix.toml", receipts, routes)
    with running_replicas(config) as replicas:
        urls = [replica.url for replica in replicas]
        for tenant in ("sk-cluster-a", "sk-cluster-b", "sk-cluster-c"):
            assert round_robin_chat(urls, MODEL, "stream", tenant) == FINAL_TEXTS
        assert fake.rejections == []
        for replica in replicas:
            assert scraped(replica.url, "streamfix_store_errors_total") == 0

        # A refusal learned through one replica: `streamfix config` reads it from the cluster.
        body = {"model": "refusing", "messages": [{"role": "user", "content": "hi"}], "store": True}
        learned = httpx.post(
            f"{urls[0]}/v1/chat/completions", json=body, headers={"authorization": "Bearer k"}
        )
        assert learned.status_code == 200, learned.text

    client = cluster.client()
    try:
        wait_until(
            lambda: any(k.endswith(b":store") for k in client.scan_iter(match="streamfix:*")),
            "the learned rule in the cluster",
        )
        keys = [key.decode() for key in client.scan_iter(match="streamfix:*", count=1000)]
        slots_by_scope: dict[str, set[int]] = {}
        for key in keys:
            scope = key[key.index("{") : key.index("}") + 1]
            slots_by_scope.setdefault(scope, set()).add(client.keyslot(key))
    finally:
        client.close()
    assert len(slots_by_scope) >= 3, slots_by_scope  # three tenants on one upstream
    assert all(len(slots) == 1 for slots in slots_by_scope.values()), slots_by_scope
    assert len(set().union(*slots_by_scope.values())) > 1  # spread by tenant, not one slot

    code, out, err = run_cli("config", "--config", str(config))
    assert code == 0, err
    assert "store (model refusing, refused with 400)" in out


async def test_cluster_lookups_across_slots_still_work(cluster: ClusterRedis) -> None:
    """A lookup whose keys are not one slot (none the proxy makes) is split per slot."""
    store = RedisStore.open(RedisOptions(cluster.url, cluster=True), 60, "sfx-slots:")
    try:
        values = {f"{{tenant-{n}:u}}:call:{n}": {"n": n} for n in range(12)}
        assert await store.put_many(values) is True
        assert await store.get_many([*values, "{other:u}:missing"]) == values
        assert store.errors == 0
    finally:
        await store.aclose()
