"""Fixtures of the end-to-end flows: node_modules for the Vercel AI SDK driver, installed once."""

from __future__ import annotations

import pytest

from tests.clients.vercel import ensure_node_modules


@pytest.fixture(scope="module")
def node_clients() -> None:
    """Tests that run the Vercel AI SDK use this: `npm ci` unless node_modules is current."""
    ensure_node_modules()
