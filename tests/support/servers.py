"""Run an ASGI app under a real uvicorn on a free loopback port, in a background thread.

Tests use this for both the proxy and the fake upstream, so every byte crosses a real socket.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from tests.support.waiting import wait_until


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Served:
    """A running server: its base URL, and the uvicorn Server for tests that look inside it
    (`server.server_state.connections` and `.tasks` count open connections and requests)."""

    url: str
    server: uvicorn.Server


@contextmanager
def serve_in_thread(app: Any, *, startup_timeout: float = 10.0) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 and yield its base URL (no trailing slash)."""
    with serving_in_thread(app, startup_timeout=startup_timeout) as served:
        yield served.url


@contextmanager
def serving_in_thread(app: Any, *, startup_timeout: float = 10.0) -> Iterator[Served]:
    """`serve_in_thread`, yielding the uvicorn Server along with the URL."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False
    )
    with serving_config_in_thread(config, startup_timeout=startup_timeout) as served:
        yield served


@contextmanager
def serving_config_in_thread(
    config: uvicorn.Config, *, startup_timeout: float = 10.0
) -> Iterator[Served]:
    """Serve a ready-made Config on its host and port, e.g. `proxy.server.serving.uvicorn_config`'s,
    the options and protocol `streamfix serve` runs."""
    port = config.port
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()

    def started() -> bool:
        if server.started:
            return True
        if not thread.is_alive():
            raise RuntimeError(f"uvicorn did not start on port {port}")
        return False

    wait_until(started, f"uvicorn to start on port {port}", startup_timeout)
    try:
        yield Served(f"http://127.0.0.1:{port}", server)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class OnLoop:
    """ASGI wrapper that notes the event loop the app runs on (a uvicorn thread has its own), so
    a test can run a function there from the outside, between two of the app's steps."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)

    def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()` called in a task on the app's loop; its result."""
        assert self.loop is not None

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=5)

    def task_count(self) -> int:
        """The tasks on the app's loop, not counting the one that counts them."""
        return self.run(lambda: len(asyncio.all_tasks()) - 1)
