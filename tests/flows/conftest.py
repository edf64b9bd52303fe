"""Fixtures of the end-to-end flows: node_modules for the Vercel AI SDK driver, installed once;
a scripted chat upstream and the proxy in front of it, for the doors' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clients.vercel import ensure_node_modules
from tests.support.door_clients import Stage, serving_proxy
from tests.support.scripted_chat_upstream import ScriptedChatUpstream, running_scripted_upstream


@pytest.fixture(scope="module")
def node_clients() -> None:
    """Tests that run the Vercel AI SDK use this: `npm ci` unless node_modules is current."""
    ensure_node_modules()


@pytest.fixture(scope="module")
def scripted_upstream() -> Iterator[ScriptedChatUpstream]:
    """One scripted upstream per module; each script has a model name of its own."""
    with running_scripted_upstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def stage(scripted_upstream: ScriptedChatUpstream) -> Iterator[Stage]:
    """The proxy (default settings, strict repairs) in front of the module's scripted upstream."""
    with serving_proxy(scripted_upstream.url) as proxy:
        yield Stage(scripted_upstream, proxy)
