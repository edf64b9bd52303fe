"""What a front supplies to the fronts' runner (front_exchange.py): its translation both ways,
its error shape, its heartbeat, and what it keeps beside the turn. A door knows its protocol;
the runner knows the chat exchange; neither knows the other's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from proxy.fronts.translator import Translator
from proxy.fronts.turns import TurnStore
from proxy.routing.routes import UpstreamRoute
from proxy.upstream.headers import RawHeaders


class FrontRequest(Protocol):
    """A front's translation of its request: the chat request and what the bridge did."""

    @property
    def chat(self) -> dict[str, Any]: ...

    @property
    def counts(self) -> dict[str, int]: ...

    @property
    def stream(self) -> bool: ...


F = TypeVar("F", bound=FrontRequest)
T = TypeVar("T", bound=Translator)


@dataclass(frozen=True, slots=True)
class Arrival:
    """What a door sees of its exchange: the request as it goes upstream (the door's own
    headers rewritten), the client's headers as sent, the route, and the turn store of this
    tenant on this upstream."""

    request: Request
    client_headers: Headers
    route: UpstreamRoute
    turns: TurnStore


class Door(ABC, Generic[F, T]):
    """One front's protocol: its translation both ways, its error shape and its heartbeat."""

    store_failed_kind: str
    """What the runner counts when the store did not take an answer's turn or records."""

    def chat_headers(self, raw: RawHeaders) -> RawHeaders:
        """The client's headers as the chat upstream takes them (unchanged by default)."""
        return raw

    @abstractmethod
    def error(self, status: int, message: str, code: str) -> Response:
        """The proxy's own error, in the front's shape."""

    def restyled(self, response: Response) -> Response:
        """An error the proxy answered in OpenAI's shape (keys, limits, an unreachable
        upstream), in the front's (unchanged by default)."""
        return response

    @abstractmethod
    def upstream_refusal(self, status: int, body: bytes) -> Response:
        """An upstream's error body (as much as was read), in the front's shape."""

    @abstractmethod
    async def translate(self, body: dict[str, Any], arrival: Arrival) -> F:
        """The front's request as chat; raises `Refused` for one the front refuses."""

    @abstractmethod
    def translator(self, front: F, body: dict[str, Any], arrival: Arrival) -> T: ...

    @abstractmethod
    def whole_body(self, front: F, translator: T, completion: dict[str, Any]) -> tuple[bytes, str]:
        """A repaired whole chat completion as the front's body, and its media type."""

    def records(
        self, front: F, forwarded: dict[str, Any], translator: T, turn: dict[str, Any] | None
    ) -> dict[str, dict[str, Any]]:
        """What the front keeps beside the turn (unscoped store keys): nothing by default."""
        return {}
