"""Redis as production runs it, started by the tests on loopback from the same `redis-server`
binary as tests/support/redis_server.py:

- `TlsRedis`: TLS only (no plain port), client certificates required, an ACL user with a
  password and the `default` user switched off; certificates from `trustme`.
- `SentinelRedis`: a master, one replica, and one `redis-server --sentinel` watching them
  (quorum 1), so a test can fail the master over (`failover()`).
- `ClusterRedis`: three masters started with `--cluster-enabled yes` and joined by
  `redis-cli --cluster create … --cluster-yes`, serving once every slot is covered.

Each is readied by asking it with redis-py (the client the proxy uses), never by sleeping.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import trustme

from tests.support.redis_server import RedisServer, ensure_redis_server
from tests.support.servers import free_port
from tests.support.waiting import wait_until

ACL_USER = "streamfix"
ACL_PASSWORD = "s3cret-acl-4f1e9b"
SERVICE_NAME = "streamfix-master"
READY_TIMEOUT = 20.0  # seconds for a deployment to serve (a cluster's slots to be covered)


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def tls_files(directory: Path) -> TlsFiles:
    """A throwaway CA, a server certificate for 127.0.0.1, and a client certificate."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("streamfix-client.test")
    files = TlsFiles(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
    )
    ca.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.server_cert))
    server.private_key_pem.write_to_path(str(files.server_key))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    client.private_key_pem.write_to_path(str(files.client_key))
    return files


class TlsRedis(RedisServer):
    """TLS on `port` (no plain port), client certificates required, ACL user and password."""

    def __init__(self) -> None:
        super().__init__()
        self.files = tls_files(self.workdir)

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def command(self, binary: str) -> list[str]:
        files = self.files
        return [
            *super().command(binary),
            "--port",
            "0",
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(files.server_cert),
            "--tls-key-file",
            str(files.server_key),
            "--tls-ca-cert-file",
            str(files.ca),
            "--tls-auth-clients",
            "yes",
            "--user",
            ACL_USER,
            "on",
            f">{ACL_PASSWORD}",
            "~*",
            "+@all",
            "--user",
            "default",
            "off",
        ]

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            ssl=True,
            ssl_ca_certs=str(self.files.ca),
            ssl_certfile=str(self.files.client_cert),
            ssl_keyfile=str(self.files.client_key),
            username=ACL_USER,
            password=ACL_PASSWORD,
            socket_timeout=1,
            socket_connect_timeout=1,
        )

    def ready(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False


class ReplicaRedis(RedisServer):
    def __init__(self, master: RedisServer) -> None:
        super().__init__()
        self.master = master

    def command(self, binary: str) -> list[str]:
        return [*super().command(binary), "--replicaof", "127.0.0.1", str(self.master.port)]


class SentinelProcess(RedisServer):
    """`redis-server sentinel.conf --sentinel`, watching `master` under SERVICE_NAME."""

    def __init__(self, master: RedisServer) -> None:
        super().__init__()
        self.master = master

    def command(self, binary: str) -> list[str]:
        config = self.workdir / "sentinel.conf"  # Sentinel rewrites it: a file of its own
        config.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.workdir}\n"
            f"sentinel monitor {SERVICE_NAME} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE_NAME} 2000\n"
            f"sentinel failover-timeout {SERVICE_NAME} 10000\n"
        )
        return [binary, str(config), "--sentinel"]


@dataclass
class SentinelRedis:
    master: RedisServer
    replica: ReplicaRedis
    sentinel: SentinelProcess

    @property
    def sentinels(self) -> list[str]:
        return [f"127.0.0.1:{self.sentinel.port}"]

    def master_port(self) -> int:
        with redis.Redis(port=self.sentinel.port, socket_timeout=1) as client:
            address = client.sentinel_get_master_addr_by_name(SERVICE_NAME)
        return int(address[1])

    def master_client(self) -> redis.Redis:
        return redis.Redis(port=self.master_port(), socket_timeout=1)

    def wait_for_replica(self) -> None:
        """Until the sentinel knows the replica as a healthy one (it can be promoted)."""

        def known() -> bool:
            with redis.Redis(port=self.replica.port, socket_timeout=1) as client:
                if client.info("replication").get("master_link_status") != "up":
                    return False
            with redis.Redis(port=self.sentinel.port, socket_timeout=1) as client:
                replicas = client.sentinel_slaves(SERVICE_NAME)
            return any(
                r["port"] == self.replica.port
                and r["is_slave"]
                and not (r["is_sdown"] or r["is_disconnected"])
                for r in replicas
            )

        wait_until(known, "the sentinel to know the replica", READY_TIMEOUT, interval=0.1)

    def failover(self) -> int:
        """Promote the replica (Sentinel's manual failover); its port once the sentinel names
        it master."""
        self.wait_for_replica()
        with redis.Redis(port=self.sentinel.port, socket_timeout=2) as client:
            client.execute_command("SENTINEL", "FAILOVER", SERVICE_NAME)
        wait_until(
            lambda: self.master_port() == self.replica.port,
            "the sentinel to name the replica master",
            READY_TIMEOUT,
            interval=0.1,
        )

        def switched() -> bool:
            with (
                redis.Redis(port=self.replica.port, socket_timeout=1) as promoted,
                redis.Redis(port=self.master.port, socket_timeout=1) as demoted,
            ):
                return (
                    promoted.info("replication")["role"] == "master"
                    and demoted.info("replication")["role"] == "slave"
                )

        # Until the old master is a replica too: a client still connected to it is then
        # refused its writes (READONLY), as after a real failover, and must follow.
        wait_until(switched, "the replica to be master, the master a replica", READY_TIMEOUT)
        return self.replica.port


@contextmanager
def running_sentinel() -> Iterator[SentinelRedis]:
    with ExitStack() as stack:
        master = RedisServer()
        stack.callback(master.close)
        master.start()
        replica = ReplicaRedis(master)
        stack.callback(replica.close)
        replica.start()
        sentinel = SentinelProcess(master)
        stack.callback(sentinel.close)
        sentinel.start()
        deployment = SentinelRedis(master, replica, sentinel)
        deployment.wait_for_replica()
        yield deployment


class ClusterNode(RedisServer):
    def __init__(self) -> None:
        super().__init__()
        self.bus_port = free_port()

    def command(self, binary: str) -> list[str]:
        return [
            *super().command(binary),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(self.workdir / "nodes.conf"),
            "--cluster-node-timeout",
            "3000",
            "--cluster-port",
            str(self.bus_port),
        ]


@dataclass
class ClusterRedis:
    nodes: list[ClusterNode]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def client(self) -> Any:
        from redis.cluster import RedisCluster

        return RedisCluster(host="127.0.0.1", port=self.nodes[0].port, socket_timeout=2)


@contextmanager
def running_cluster(masters: int = 3) -> Iterator[ClusterRedis]:
    """`masters` nodes joined into one cluster, every slot covered, no replicas."""
    with ExitStack() as stack:
        nodes = []
        for _ in range(masters):
            node = ClusterNode()
            stack.callback(node.close)
            node.start()
            nodes.append(node)
        cli = shutil.which("redis-cli") or str(Path(ensure_redis_server()).with_name("redis-cli"))
        joined = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes), "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert joined.returncode == 0, joined.stdout + joined.stderr

        def serving() -> bool:
            for node in nodes:
                with redis.Redis(port=node.port, socket_timeout=1) as client:
                    if client.cluster("info").get("cluster_state") != "ok":
                        return False
            return True

        wait_until(serving, "every node to say cluster_state:ok", READY_TIMEOUT, interval=0.1)
        yield ClusterRedis(nodes)
