"""What a door supplies to the one exchange runner (server/exchange_runner.py): its name and
path, how its client's request becomes the chat request, its error shape, and how it renders
the answer the answer machine (repair/answer.py) reads. A door knows its protocol; the runner
knows the exchange; neither knows the other's.

Each door is declared once, in its own module of this package, and listed in `DOORS`
(__init__.py): its route, its `streamfix.front` on spans and the replay of its cassettes
(`streamfix replay` and `explain` send a recorded client's request through its door again)
all hang off that declaration.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import httpx
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from proxy.fronts.turns import TurnStore
from proxy.learning.refused_parts import RefusedPart
from proxy.repair.answer_ends import Aborted, End, UpstreamError, Whole
from proxy.repair.rendering import Rendering
from proxy.repair.tenancy import ReceiptScope
from proxy.routing.routes import UpstreamRoute
from proxy.server.record import ExchangeRecord
from proxy.store.protocol import Store
from proxy.upstream.headers import RawHeaders
from proxy.wire import json_codec


class FrontRequest(Protocol):
    """A door's translation of its request: the chat request and what the translation did."""

    @property
    def chat(self) -> dict[str, Any]: ...

    @property
    def counts(self) -> dict[str, int]: ...

    @property
    def stream(self) -> bool: ...


F = TypeVar("F", bound=FrontRequest)
R = TypeVar("R", bound=Rendering)


@dataclass(slots=True)
class Arrival:
    """What a door sees of its exchange: the request as it goes upstream (the door's own
    headers rewritten), the client's headers as sent, the route, and the store with this
    tenant's scope on this upstream (`turns`, made when a door asks)."""

    request: Request
    client_headers: Headers
    route: UpstreamRoute
    store: Store
    scope: ReceiptScope

    @property
    def turns(self) -> TurnStore:
        return TurnStore(self.store, self.scope)


class Door(ABC, Generic[F, R]):
    """One door's protocol around the chat exchange."""

    name: ClassVar[str]
    """`streamfix.front` on the exchange's span, and the door's name in logs."""
    path: ClassVar[str]
    """The door's route (`POST`)."""
    store_failed_kind: ClassVar[str] = "turn_store_failed"
    """What the runner counts when the store did not take an answer's turn or records."""
    sends_client_bytes: ClassVar[bool] = False
    """True when the client's own bytes go upstream if no repair changed its request (a chat
    client's): no re-encoding on the way up."""
    keeps_client_request: ClassVar[bool] = True
    """A recording keeps the client's own request beside the chat request it became (a front:
    a chat cassette's request is the client's already)."""
    relays_refusals: ClassVar[bool] = False
    """True when an upstream's refusal reaches the client as the upstream sent it (its client
    speaks the upstream's protocol); else the door renders it in its own shape."""
    estimates_tokens: ClassVar[bool] = False
    """True for a door that says its answer's input tokens before the upstream does (the
    Messages door's `message_start`): the exchange recalls and teaches the model's input tokens
    per byte (learning/token_ratios.py)."""
    keeps_turns: ClassVar[bool] = True
    """False for a door whose answers carry no turn to keep (a chat client's receipts are kept
    by the repairs): the runner then never asks its rendering for one."""
    relays_unframed_streams: ClassVar[bool] = False
    """True when a streamed request answered with a body that is not an event stream is
    relayed as received; else the door renders that whole answer as its stream."""
    query_parameters: ClassVar[frozenset[str]] = frozenset()
    """The door's own query parameters (lower case): what its clients put on the URL for the
    door's protocol, which no chat upstream defines. They are dropped before the send (and
    counted, `door_query_parameter_dropped`); every other parameter goes on as sent."""

    def chat_headers(self, raw: RawHeaders) -> RawHeaders:
        """The client's headers as the chat upstream takes them (unchanged by default)."""
        return raw

    @abstractmethod
    def parse(self, raw: bytes) -> dict[str, Any]:
        """The client's request body; raises `Refused` for one that is not a request."""

    @abstractmethod
    async def translate(self, body: dict[str, Any], arrival: Arrival) -> F:
        """The door's request as chat; raises `Refused` for one the door refuses."""

    @abstractmethod
    def error(self, status: int, message: str, code: str) -> Response:
        """The proxy's own error, in the door's shape."""

    def restyled(self, response: Response) -> Response:
        """An error the proxy answered in OpenAI's shape (keys, limits, an unreachable
        upstream), in the door's (unchanged by default)."""
        return response

    @abstractmethod
    def upstream_refusal(self, status: int, body: bytes) -> Response:
        """An upstream's error body (as much as was read), in the door's shape."""

    def part_refused(
        self, front: F, part: RefusedPart, model: object, said: str | None
    ) -> Response:
        """A 400 for a content part this upstream refuses for `model` (learning/
        refused_parts.py): where the request holds it, the upstream's words when it just said
        so (`said`; None when it said so before and nothing went up), and what to do."""
        message = part.message(part.places(front.chat), model, said)
        return self.error(400, message, part.refused_kind)

    @abstractmethod
    def rendering(
        self, front: F, body: dict[str, Any], arrival: Arrival, record: ExchangeRecord
    ) -> R:
        """The rendering of this exchange's answer."""

    @abstractmethod
    def stream_head(
        self, upstream: httpx.Response, record: ExchangeRecord
    ) -> tuple[int, RawHeaders]:
        """The status and headers of a streamed answer (the SSE headers are the runner's)."""

    @abstractmethod
    def whole_answer(
        self, front: F, rendering: R, whole: Whole, upstream: httpx.Response, record: ExchangeRecord
    ) -> Response:
        """An answer read whole (a body, or a stream folded into one), ended as `whole.end`
        says, as the door's response with the exchange's `x-request-id` (the runner adds the
        repairs header once the exchange is booked)."""

    def failed_answer(self, end: End) -> Response:
        """An answer that did not end as one, as the door's 502: the upstream's own words for
        its error, or the proxy's for what else ended it."""
        if isinstance(end, UpstreamError):
            return self.upstream_refusal(502, json_codec.dumps(end.body))
        assert isinstance(end, Aborted)
        return self.error(502, end.message, end.code)

    def records(
        self, front: F, forwarded: dict[str, Any], rendering: R, turn: dict[str, Any] | None
    ) -> dict[str, dict[str, Any]]:
        """What the door keeps beside the turn (unscoped store keys): nothing by default."""
        return {}
