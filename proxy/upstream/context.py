"""What the app and the transports tell each other beyond a request's URL and a response's
status: the app's routing data on the request, and a recorder's copy on the response."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

UPSTREAM = "streamfix.upstream"
"""Request extension holding an `UpstreamContext`."""
CLIENT_COPY = "streamfix.client_copy"
"""Response extension holding a `ClientCopy`: set by a recording transport, read by the server,
which hands it what the client is sent."""


@dataclass(frozen=True, slots=True)
class UpstreamContext:
    base_url: str
    """The route's base URL: what request paths are relative to in a cassette."""
    profile: str
    """The provider profile that applies, noted in a cassette."""


class ClientCopy(Protocol):
    """A copy of what the client is sent, kept by someone below the server (a recording
    transport's cassette writer): delivery hands it every byte, then saves it once."""

    def sent(self, data: bytes) -> None: ...

    def client_request(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        translation: dict[str, int],
    ) -> None:
        """A front's exchange: the client's own request, before the front translated it into
        the chat request that went upstream, and what the translation counted. The copy
        keeps it credential-free."""

    async def save(self) -> None:
        """The exchange is over, however it ended. Whatever it needs to keep is taken before
        its first await, so a cancellation landing there loses nothing."""


def context_of(request: httpx.Request) -> UpstreamContext | None:
    """The app's context for `request`; None for a request the app did not build (tests)."""
    return request.extensions.get(UPSTREAM)


def client_copy_of(response: httpx.Response) -> ClientCopy | None:
    """The copy a recording transport asked to be kept of what the client is sent, if any."""
    return response.extensions.get(CLIENT_COPY)
