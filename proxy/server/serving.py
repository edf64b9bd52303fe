"""The uvicorn server `streamfix serve` runs: its options, its protocol, and running it.

Tests build their server with `uvicorn_config` too, so they exercise the options served.
"""

from __future__ import annotations

import logging
import resource
import sys
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from proxy.server.connection_limits import ClientLimitsProtocol
from proxy.settings.schema import ServerSettings

logger = logging.getLogger(__name__)

# File descriptors beyond the connections: the listening socket, logs, a Redis store. Each client
# connection may hold an upstream connection too, so start-up asks for twice max_connections
# plus these.
SPARE_FILES = 256


class ProxyConfig(uvicorn.Config):
    """uvicorn's Config, also carrying the server settings ClientLimitsProtocol reads. uvicorn
    pickles the Config to each worker process, so the workers get the same limits."""

    def __init__(self, app: Any, server: ServerSettings, **options: Any) -> None:
        super().__init__(app, **options)
        self.client_limits = server


def uvicorn_config(app: Any, server: ServerSettings, log_level: str, **extra: Any) -> ProxyConfig:
    """The Config for `app` (an ASGI app, or an import string with `factory=True`)."""
    options: dict[str, Any] = {
        "host": server.host,
        "port": server.port,
        "log_level": log_level,
        "access_log": False,  # the proxy logs one line per exchange itself
        "log_config": None,  # keep the handlers configure_logging installed
        "timeout_graceful_shutdown": server.shutdown_grace_seconds,
        # X-Forwarded-* never matter here (the upstream is fixed by configuration); parsing
        # them costs time on every request and widens what a client can influence.
        "proxy_headers": False,
        # uvicorn's httptools protocol with the head, connection and drain limits.
        "http": ClientLimitsProtocol,
        "timeout_keep_alive": server.keepalive_timeout_seconds,
        # uvicorn's 2048 dropped part of a burst of connections that the kernel would have
        # queued (each dropped one retried a second or more later).
        "backlog": server.backlog,
        # A WebSocket message is a request body (the Responses door's socket): no larger.
        "ws_max_size": server.max_request_bytes,
        # Not uvicorn's limit_concurrency: it counts connections too, but only refuses their
        # requests (in plain text), so idle connections past it would still be held.
    }
    return ProxyConfig(app, server, **options | extra)


def run(config: ProxyConfig) -> None:
    """What `uvicorn.run` does with a ready Config: one server, or workers sharing a socket."""
    limits = config.client_limits
    allow_open_files(2 * limits.max_connections + SPARE_FILES)
    if limits.max_buffered_request_bytes < limits.max_request_bytes:
        logger.warning(
            "server.max_buffered_request_bytes (%d) is below server.max_request_bytes (%d): "
            "bodies between the two always get 503",
            limits.max_buffered_request_bytes,
            limits.max_request_bytes,
        )
    server = uvicorn.Server(config)
    try:
        if config.workers > 1:
            Multiprocess(config, sockets=[config.bind_socket()]).run()
        else:
            server.run()
    except KeyboardInterrupt:  # pragma: no cover - as uvicorn.run: Ctrl+C is a normal stop
        pass
    if config.workers == 1 and not server.started:
        sys.exit(STARTUP_FAILURE)


def allow_open_files(wanted: int) -> None:
    """Raise the soft open-files limit towards `wanted` (the hard limit caps it): at the common
    soft default of 1024, accept() would fail long before max_connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < wanted:
        logger.warning(
            "open-files limit %d is below twice server.max_connections (a client and an "
            "upstream connection each) plus %d spare; the system will refuse connections "
            "before the proxy's cap does",
            target,
            SPARE_FILES,
        )
