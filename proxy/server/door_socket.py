"""A door over a WebSocket: the Responses API as Codex CLI speaks it on `/v1/responses` when its
provider says `supports_websockets = true`.

Codex sends one `{"type": "response.create", ...the request's fields...}` text frame per
response and reads the same events the HTTP stream carries, one JSON text frame each, until
`response.completed`; responses on one socket run one after another. Each `response.create` is
one exchange on the door's one runner (server/exchange_runner.py): the proxy's keys from the
upgrade's headers, the body limits on each message, the same learning, metrics and log line.
The rendered SSE events become frames here; nothing else is the socket's.

What is the socket's own:

- a refusal before the first byte (the proxy's keys, a limit, the upstream's 400) is one
  `{"type": "error", "status": N, "error": {...}}` frame, the shape Codex maps to that HTTP
  status (a 400 is not retried); the socket stays open for the next response;
- the heartbeat is the door's `response.in_progress` as a frame: Codex's idle timeout counts
  text frames only (it answers pings without looking);
- `previous_response_id` naming the socket's last response is, as on OpenAI's socket, local to
  the connection: Codex then sends only the new items, and the request goes on with the last
  request's input and the items the last response returned in front of them, which is what
  Codex would have sent over HTTP;
- Codex's prewarm (`generate: false`) is answered empty without the upstream;
- a client that closes the socket ends the upstream request at once (the exchange's
  `http.disconnect`);
- one response at a time: a message that arrives while one runs waits (at most
  `MAX_WAITING`); past that, after the running response, the socket gets an error frame and
  is closed (1008).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from proxy.server.auth import is_allowed
from proxy.server.doors.door import Door
from proxy.server.errors import ClientError
from proxy.server.exchange_runner import ExchangeRunner
from proxy.server.exchanges import new_request_id
from proxy.wire import json_codec

logger = logging.getLogger(__name__)

MAX_WAITING = 4
_NAMES_KEPT = re.compile(rb'"(?:response\.created|response\.output_item\.done)"')
"""The events whose content the socket keeps (the response's id, its output items)."""
"""Messages that may wait for the running response to end. Codex waits for
`response.completed` before its next `response.create` (its `response.processed` may come
between), so a client past this is not Codex: after the running response it gets an error
frame and the socket is closed."""

POLICY_VIOLATION = 1008
IGNORED = frozenset({"response.processed"})
"""Codex's acknowledgement after it handled a response: nothing to answer."""


def _error_frame(status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> str:
    """An HTTP refusal as the socket's `error` event, with the status and the headers Codex
    reads from it (`retry-after` among them)."""
    try:
        parsed = json_codec.loads(body) if body else {}
    except json_codec.JSONDecodeError:
        parsed = {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        text = body.decode("utf-8", "replace")[:500]
        error = {"message": text or f"answered {status}", "type": "server_error"}
    kept = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name.lower() not in (b"content-length", b"content-type")
    }
    frame = {"type": "error", "status": status, "error": error, "headers": kept}
    return json_codec.dumps(frame).decode()


def _error(status: int, message: str, code: str) -> str:
    body = ClientError(status, message, code).response().body
    return _error_frame(status, bytes(body), [])


def sse_data(block: bytes) -> bytes | None:
    """The data of one SSE event (a comment has none)."""
    lines = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line[:5] == b"data:"]
    return b"\n".join(lines) if lines else None


@dataclass(slots=True)
class LastResponse:
    """What this socket's last response started from and returned: the baseline a follow-up
    naming it extends."""

    id: str | None = None
    input: list[Any] = field(default_factory=list)
    output: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class DoorSocket:
    """One accepted socket, serving `door` on `runner`."""

    runner: ExchangeRunner
    door: Door[Any, Any]
    websocket: WebSocket
    last: LastResponse = field(default_factory=LastResponse)
    waiting: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False

    async def serve(self) -> None:
        reader = asyncio.ensure_future(self._read())
        try:
            while (text := await self.waiting.get()) is not None:
                await self._answer(text)
                if self.overflowed:
                    message = f"at most {MAX_WAITING} messages may wait for a running response"
                    await self.websocket.send_text(_error(400, message, "too_many_messages"))
                    await self.websocket.close(POLICY_VIOLATION)
                    return
        except WebSocketDisconnect:
            pass  # the client left while it was being sent to
        finally:
            reader.cancel()

    async def _read(self) -> None:
        """Every message the client sends, in order; its leaving ends the running exchange."""
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None:
                    raw = message.get("bytes") or b""
                    text = raw.decode("utf-8", "replace")
                if self.waiting.qsize() >= MAX_WAITING:
                    self.overflowed = True
                    continue
                self.waiting.put_nowait(text)
        finally:
            self.gone.set()
            self.waiting.put_nowait(None)

    async def _answer(self, text: str) -> None:
        try:
            message = json_codec.loads(text)
        except json_codec.JSONDecodeError as exc:
            await self._send(_error(400, f"message is not valid JSON: {exc}", "invalid_json"))
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if kind in IGNORED:
            return
        if kind != "response.create":
            said = f"unknown message type {kind!r}; this socket takes 'response.create'"
            await self._send(_error(400, said, "invalid_request"))
            return
        body = self._request(message)
        if body.get("generate") is False:
            await self._warmed(body)
            return
        response = await self.runner.run(self.door, self._exchange(json_codec.dumps(body)))
        await self._relay(response, body)

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        """The Responses request the message carries, streamed, with a follow-up of this
        socket's last response made whole."""
        body = {key: value for key, value in message.items() if key != "type"}
        body["stream"] = True
        last = self.last
        if last.id is not None and body.get("previous_response_id") == last.id:
            body["input"] = [*last.input, *last.output, *_items(body.get("input"))]
            del body["previous_response_id"]
        return body

    def _exchange(self, content: bytes) -> Request:
        """The message as the door's POST: the upgrade's headers (the proxy's key, the
        client's own), the message as its body, and `http.disconnect` when the socket goes."""
        ws: Scope = self.websocket.scope
        headers = [
            (name, value)
            for name, value in ws["headers"]
            if not name.startswith(b"sec-websocket-") and name not in (b"upgrade", b"connection")
        ]
        headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(content)).encode()))
        scope = {
            **ws,
            "type": "http",
            "method": "POST",
            "scheme": "https" if ws.get("scheme") == "wss" else "http",
            "http_version": "1.1",
            "headers": headers,
        }
        sent = False
        gone = self.gone

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": content, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        return Request(scope, receive)

    async def _relay(self, response: Response, body: dict[str, Any]) -> None:
        """The exchange's answer as frames: each SSE event one frame, a refusal one error
        frame. The answer's own ASGI send is where its bytes arrive."""
        status = 200
        head: list[tuple[bytes, bytes]] = []
        pending = b""
        whole = bytearray()
        created: str | None = None
        output: list[Any] = []

        async def send(message: Message) -> None:
            nonlocal status, head, pending, created
            if message["type"] == "http.response.start":
                status = message["status"]
                head = list(message.get("headers") or [])
                return
            chunk = message.get("body", b"")
            if status != 200:
                whole.extend(chunk)
                return
            pending += chunk.replace(b"\r\n", b"\n")
            *blocks, pending = pending.split(b"\n\n")
            for block in blocks:
                data = sse_data(block)
                if data is None:
                    continue
                # Only the two events this socket keeps are read: every other goes on unread.
                if _NAMES_KEPT.search(data) is not None:
                    event = _event_of(data)
                    if event.get("type") == "response.created":
                        created = (event.get("response") or {}).get("id")
                    elif event.get("type") == "response.output_item.done":
                        output.append(event.get("item"))
                await self.websocket.send_text(data.decode("utf-8", "replace"))

        await response(self._exchange(b"").scope, self._disconnect_receiver(), send)
        if status != 200:
            await self._send(_error_frame(status, bytes(whole), head))
            return
        self.last = LastResponse(created, _items(body.get("input")), output)

    async def _warmed(self, body: dict[str, Any]) -> None:
        """Codex's prewarm (`generate: false`, its first message on a socket) asks for no
        answer, only the response it may name next: created and completed empty, as OpenAI's
        socket answers it, and nothing goes upstream (it would be a whole request)."""
        response_id = f"resp_{new_request_id()[:24]}"
        response: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "status": "completed",
            "model": body.get("model"),
            "output": [],
        }
        for number, kind in enumerate(("response.created", "response.completed")):
            frame = {"type": kind, "sequence_number": number, "response": response}
            await self._send(json_codec.dumps(frame).decode())
        self.last = LastResponse(response_id, _items(body.get("input")), [])

    def _disconnect_receiver(self) -> Callable[[], Any]:
        gone = self.gone

        async def receive() -> Message:
            await gone.wait()
            return {"type": "http.disconnect"}

        return receive

    async def _send(self, frame: str) -> None:
        await self.websocket.send_text(frame)


def _items(given: Any) -> list[Any]:
    """A request's `input` as items: the easy form (a string) is one user message."""
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def _event_of(data: bytes) -> dict[str, Any]:
    try:
        event = json_codec.loads(data)
    except json_codec.JSONDecodeError:
        return {}
    return event if isinstance(event, dict) else {}


async def serve_door_socket(
    runner: ExchangeRunner, door: Door[Any, Any], websocket: WebSocket
) -> None:
    """The door's WebSocket: refused at the upgrade without the proxy's key (401, as the HTTP
    door answers), else accepted and served until either side closes."""
    exchanges = runner.exchanges
    if exchanges.proxy_keys and not is_allowed(websocket.headers, exchanges.proxy_keys):
        error = ClientError(
            401, "a valid streamfix API key is required", "invalid_api_key", "authentication_error"
        )
        refusal = Request({**websocket.scope, "type": "http", "method": "GET"})
        answer = door.restyled(exchanges.refused(error, refusal, new_request_id()))
        try:
            await websocket.send_denial_response(answer)
        except RuntimeError:  # a server without the denial extension: a policy close
            await websocket.close(POLICY_VIOLATION)
        return
    await websocket.accept()
    await DoorSocket(runner, door, websocket).serve()
