"""What the event-loop tests share: each test's coroutine run under asyncio and under uvloop
(the `run` fixture), and TLS contexts from a throwaway CA."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest
import trustme
import uvloop

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
TEST_TIMEOUT = 10.0  # a whole test, on top of each module's per-await bounds


def loop_runner(loop: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """`run(main())` runs the coroutine on a fresh loop of that kind, and fails the test when
    the loop reported an error (an exception nobody retrieved, one escaping a callback)."""

    def run(main: Coroutine[Any, Any, Any]) -> Any:
        reported: list[dict[str, Any]] = []
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.get_loop().set_exception_handler(lambda _, context: reported.append(context))
            result = runner.run(asyncio.wait_for(main, TEST_TIMEOUT))
        assert reported == []
        return result

    return run


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """A module that imports this fixture runs each of its tests once per loop kind."""
    return loop_runner(request.param)


def server_context(ca: trustme.CA, *identities: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*identities).configure_cert(context)
    return context


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = httpx.create_ssl_context()
    ca.configure_trust(context)
    return context
