"""Shared fixtures: a fake upstream and the real proxy, each under uvicorn on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
import trustme

from tests.support.fake_upstream import FakeUpstream, running_fake_upstream
from tests.support.loops import run  # noqa: F401 (the `run` fixture: a test's coroutine on each loop)
from tests.support.proxies import running_proxy


@pytest.fixture
def fake_upstream() -> Iterator[tuple[FakeUpstream, str]]:
    with running_fake_upstream() as pair:
        yield pair


@pytest.fixture
def proxy_for() -> Callable[..., AbstractContextManager[str]]:
    """`with proxy_for(upstream_url, **config) as url:` starts a proxy for one test."""
    return running_proxy


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """A throwaway certificate authority for the TLS tests (one per module)."""
    return trustme.CA()
