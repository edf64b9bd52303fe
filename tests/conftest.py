"""Shared fixtures: a fake upstream and the real proxy, each under uvicorn on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.fake_upstream import FakeUpstream, running_fake_upstream
from tests.loops import run  # noqa: F401 (the `run` fixture: a test's coroutine on each loop)
from tests.servers import serve_in_thread


@contextmanager
def running_proxy(upstream_base_url: str, **values: Any) -> Iterator[str]:
    """The proxy in front of `upstream_base_url`; yields the proxy's root URL."""
    settings = Settings().with_values(
        {"upstream.base_url": upstream_base_url, "repairs.strict": True, **values}
    )
    with serve_in_thread(create_app(settings)) as url:
        yield url


@pytest.fixture
def fake_upstream() -> Iterator[tuple[FakeUpstream, str]]:
    with running_fake_upstream() as pair:
        yield pair


@pytest.fixture
def proxy_for() -> Callable[..., AbstractContextManager[str]]:
    """`with proxy_for(upstream_url, **config) as url:` starts a proxy for one test."""
    return running_proxy
