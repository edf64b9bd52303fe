"""What the Responses and Messages doors share: a JSON request of their own, a translator that
turns the repaired chat chunks into their events (fronts/translator.py), their answers always
a 200 of their own making, and the upstream's refusals in their own error shape."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

import httpx
from starlette.responses import Response

from proxy.fronts.translator import Refused, Translator
from proxy.repair.answer_ends import Clean, End, Piece, Whole
from proxy.repair.tally import Tally
from proxy.server.delivery import SSE_HEADERS, repairs_comment, repairs_header
from proxy.server.doors.door import Arrival, Door, F
from proxy.server.record import ExchangeRecord
from proxy.upstream.headers import RawHeaders
from proxy.wire import json_codec

T = TypeVar("T", bound=Translator)


class TranslatedRendering(Generic[T]):
    """A front's translator as the runner's rendering: the chunks of the pieces go to it (the
    bytes they came as mean nothing to its client), its events come out joined. For a client
    that asked (`x-streamfix-debug: 1`, `debug` the exchange's tally), the stream's repairs go
    out as an SSE comment right before the terminal events, as the chat door's go before
    `[DONE]`: every SSE parser skips a comment (anthropic-python's and openai-python's
    decoders drop a line that starts with `:`)."""

    relays_bytes: ClassVar[bool] = False
    __slots__ = ("_debug", "translator")

    def __init__(self, translator: T, debug: Tally | None = None) -> None:
        self.translator = translator
        self._debug = debug

    @property
    def counts(self) -> dict[str, int]:
        return self.translator.counts

    @property
    def answer_id(self) -> str:
        return self.translator.answer_id

    def start(self) -> bytes:
        return b"".join(self.translator.start())

    def pieces(self, pieces: list[Piece]) -> bytes:
        feed = self.translator.feed
        out: list[bytes] = []
        for chunk, _ in pieces:
            if chunk is not None:
                out += feed(chunk)
        return b"".join(out)

    def heartbeat(self) -> bytes:
        return b"".join(self.translator.heartbeat())

    def settle(self, end: End, last: list[Piece]) -> bytes:
        return self.pieces(last) + b"".join(self.translator.settle(end))

    def terminal(self) -> bytes:
        events = b"".join(self.translator.terminal())
        if self._debug is None:
            return events
        return repairs_comment(self._debug, self.translator.counts) + events

    def turn(self) -> dict[str, Any] | None:
        return self.translator.turn()


class TranslatedDoor(Door[F, TranslatedRendering[T]], Generic[F, T]):
    """A door in front of the chat core with a protocol of its own."""

    keeps_client_request: ClassVar[bool] = True

    @abstractmethod
    def error_body(self, status: int, message: str, code: str) -> dict[str, Any]:
        """The proxy's own error as the door's error object."""

    def error(self, status: int, message: str, code: str) -> Response:
        body = json_codec.dumps(self.error_body(status, message, code))
        return Response(body, status_code=status, media_type="application/json")

    def parse(self, raw: bytes) -> dict[str, Any]:
        try:
            body = json_codec.loads(raw)
        except json_codec.JSONDecodeError as exc:
            message = f"request body is not valid JSON: {exc}"
            raise Refused(message, 400, self.error_body(400, message, "invalid_json")) from exc
        if not isinstance(body, dict):
            message = "request body must be a JSON object"
            raise Refused(message, 400, self.error_body(400, message, "invalid_request"))
        return body

    @abstractmethod
    def translator(self, front: F, body: dict[str, Any], arrival: Arrival) -> T: ...

    def rendering(
        self, front: F, body: dict[str, Any], arrival: Arrival, record: ExchangeRecord
    ) -> TranslatedRendering[T]:
        return self.rendered(self.translator(front, body, arrival), record)

    def rendered(self, translator: T, record: ExchangeRecord) -> TranslatedRendering[T]:
        """The translator as the exchange's rendering: with the stream's repairs in a comment
        before the terminal events when the client asked for them (`x-streamfix-debug: 1`)."""
        return TranslatedRendering(translator, record.tally if record.debug else None)

    @abstractmethod
    def whole_body(self, front: F, translator: T, completion: dict[str, Any]) -> tuple[bytes, str]:
        """A repaired whole chat completion as the door's body, and its media type."""

    def stream_head(
        self, upstream: httpx.Response, record: ExchangeRecord
    ) -> tuple[int, RawHeaders]:
        request_id = (b"x-request-id", record.request_id.encode("latin-1"))
        return 200, [*SSE_HEADERS, request_id, repairs_header(record.tally)]

    def whole_answer(
        self,
        front: F,
        rendering: TranslatedRendering[T],
        whole: Whole,
        upstream: httpx.Response,
        record: ExchangeRecord,
    ) -> Response:
        end = whole.end
        if isinstance(end, Clean) and whole.completion is not None:
            body, media_type = self.whole_body(front, rendering.translator, whole.completion)
            response = Response(body, status_code=200, media_type=media_type)
        else:
            response = self.failed_answer(end)
        response.headers["x-request-id"] = record.request_id
        return response
