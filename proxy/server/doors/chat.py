"""`POST /v1/chat/completions`: the chat door, a door like the others with an identity
translation. Its client speaks the upstream's own protocol, so what needs nothing goes through
as received: the client's bytes go up when no request repair changed them, every event no
repair touched goes out as the bytes the upstream sent, and the upstream's refusals are relayed
as they came. What it renders itself is only what the answer machine decided: `[DONE]` once
after a clean end, its error event after a cut or empty stream, one completion for a stream
answering a request that asked for one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx
from starlette.responses import Response

from proxy.fronts.translator import Refused
from proxy.repair.answer_ends import Aborted, Clean, End, Piece, UpstreamError, Whole
from proxy.repair.tally import Tally
from proxy.routing.routes import CHAT_PATH
from proxy.server.chat_request import parse_chat_request
from proxy.server.delivery import SSE_HEADERS, repairs_comment, repairs_header
from proxy.server.doors.door import Arrival, Door
from proxy.server.errors import ClientError, error_body, error_event, error_response
from proxy.server.exchanges import Exchanges
from proxy.server.keepalive import COMMENT
from proxy.server.record import ExchangeRecord
from proxy.upstream.headers import RawHeaders
from proxy.wire import json_codec
from proxy.wire.error_bodies import read_error
from proxy.wire.sse import DONE, encode

_SSE_NAMES = frozenset(name for name, _ in SSE_HEADERS)
_BODY_NAMES = frozenset({b"content-type", b"content-length"})


NOTHING_COUNTED: dict[str, int] = {}
"""The counts of a translation or rendering that does nothing: one empty dict, never written."""


class ChatRequest:
    """A chat client's request: itself."""

    __slots__ = ("chat", "stream")
    counts = NOTHING_COUNTED

    def __init__(self, chat: dict[str, Any]) -> None:
        self.chat = chat
        self.stream = bool(chat.get("stream"))


class ChatRendering:
    """A chat answer rendered for a chat client: the pieces as they came (re-encoded only
    where a repair changed them), `[DONE]` after a clean end, an error event after any other
    (no finish and no `[DONE]`: a truncated answer must not look complete)."""

    relays_bytes: ClassVar[bool] = True
    answer_id = ""
    counts = NOTHING_COUNTED
    __slots__ = ("_debug", "_tally")

    def __init__(self, tally: Tally, debug: bool) -> None:
        self._tally = tally
        self._debug = debug

    def start(self) -> bytes:
        return b""

    def pieces(self, pieces: list[Piece]) -> bytes:
        if len(pieces) == 1:  # the common case: one event, untouched, as received
            chunk, raw = pieces[0]
            return raw if raw is not None else encode(chunk)
        out = []
        for chunk, raw in pieces:
            out.append(raw if raw is not None else encode(chunk))
        return b"".join(out)

    def heartbeat(self) -> bytes:
        return COMMENT

    def settle(self, end: End, last: list[Piece]) -> bytes:
        out = self.pieces(last) if last else b""
        if isinstance(end, Clean):
            if not end.done_seen:
                self._tally.count("done_added", 1)  # clients waiting for it get one
            trailer = repairs_comment(self._tally) if self._debug else b""
            return out + trailer + DONE
        if isinstance(end, UpstreamError):
            return out  # its own event went out as received, in its place
        assert isinstance(end, Aborted)
        return out + error_event(end.message, "upstream_error", end.code)

    def terminal(self) -> bytes:
        return b""

    def turn(self) -> dict[str, Any] | None:
        return None  # a chat client's receipts are kept by the repairs (ReceiptCapture)


class ChatDoor(Door[ChatRequest, ChatRendering]):
    name = "chat_completions"
    path = "/v1/" + CHAT_PATH.decode()
    sends_client_bytes = True
    keeps_client_request = False
    relays_refusals = True
    relays_unframed_streams = True
    keeps_turns = False

    def parse(self, raw: bytes) -> dict[str, Any]:
        try:
            return parse_chat_request(raw)
        except ClientError as exc:
            body = error_body(exc.message, exc.type, exc.code)
            raise Refused(exc.message, exc.status, body) from exc

    async def translate(self, body: dict[str, Any], arrival: Arrival) -> ChatRequest:
        return ChatRequest(body)

    def error(self, status: int, message: str, code: str) -> Response:
        kind = "upstream_error" if status >= 500 else "invalid_request_error"
        return error_response(status, message, kind, code)

    def upstream_refusal(self, status: int, body: bytes) -> Response:
        said = read_error(body)
        message = said.message or f"upstream answered {status}"
        return error_response(status, message, said.type or "upstream_error", said.code or "")

    def rendering(
        self, front: ChatRequest, body: dict[str, Any], arrival: Arrival, record: ExchangeRecord
    ) -> ChatRendering:
        return ChatRendering(record.tally, record.debug)

    def stream_head(
        self, upstream: httpx.Response, record: ExchangeRecord
    ) -> tuple[int, RawHeaders]:
        headers = Exchanges.client_headers(upstream, record.request_id, decoded=True)
        kept = [f for f in headers if f[0].lower() not in _SSE_NAMES]
        return upstream.status_code, [*kept, *SSE_HEADERS, repairs_header(record.tally)]

    def whole_answer(
        self,
        front: ChatRequest,
        rendering: ChatRendering,
        whole: Whole,
        upstream: httpx.Response,
        record: ExchangeRecord,
    ) -> Response:
        headers = Exchanges.client_headers(upstream, record.request_id, decoded=True)
        end = whole.end
        if isinstance(end, Clean) and whole.completion is not None:
            body = json_codec.dumps(whole.completion) if whole.changed else whole.raw
        elif whole.as_received:
            body = whole.raw  # not ours to fix: passed on as received
        else:  # a stream folded for a client that asked for JSON, which did not end as one
            failed = self.failed_answer(end)
            failed.headers["x-request-id"] = record.request_id
            return failed
        response = Response(body, status_code=upstream.status_code)
        if not whole.as_received:  # the upstream said event stream; the client gets JSON
            headers = [f for f in headers if f[0].lower() not in _BODY_NAMES]
            response.raw_headers.append((b"content-type", b"application/json"))
        response.raw_headers.extend(headers)
        return response


CHAT = ChatDoor()
