"""The real proxy under uvicorn on loopback, in front of a given upstream."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.support.servers import serve_in_thread


@contextmanager
def running_proxy(upstream_base_url: str, **values: Any) -> Iterator[str]:
    """The proxy in front of `upstream_base_url`; yields the proxy's root URL."""
    settings = Settings().with_values(
        {"upstream.base_url": upstream_base_url, "repairs.strict": True, **values}
    )
    with serve_in_thread(create_app(settings)) as url:
        yield url
