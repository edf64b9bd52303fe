"""What the app tells the transports about a request beyond its URL, in the request's
extensions: routing data a transport cannot read from the URL, and the exchange the request
belongs to."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from proxy.repair.exchange import Exchange

UPSTREAM = "streamfix.upstream"
"""Request extension holding an `UpstreamContext`."""


@dataclass(frozen=True, slots=True)
class UpstreamContext:
    base_url: str
    """The route's base URL: what request paths are relative to in a cassette."""
    profile: str
    """The provider profile that applies, noted in a cassette."""
    exchange: Exchange | None = None
    """The exchange this request belongs to: where a recording transport leaves its copy of
    what the client is sent (`Exchange.client_copy`), for delivery to fill and save."""


def context_of(request: httpx.Request) -> UpstreamContext | None:
    """The app's context for `request`; None for a request the app did not build (tests)."""
    return request.extensions.get(UPSTREAM)
