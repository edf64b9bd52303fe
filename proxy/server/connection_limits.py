"""uvicorn's httptools protocol with limits on what a client may hold open.

uvicorn (0.55, the minor pyproject.toml pins) times a connection out only between requests
(`timeout_keep_alive`, armed when a response completes): a connection that never sends a whole
head is held for ever, and httptools puts no bound on a head's size. This subclass adds, per
connection:

- a head deadline: a fresh connection must deliver its first complete request head within
  `server.header_timeout_seconds`, and every later head within that time of its first byte;
  past it the connection is closed, after a 408 when the client had begun a request;
- a head size cap: a head still incomplete after `server.max_header_bytes` gets a 431;
- a connection cap: a connection beyond `server.max_connections` gets a 503 and is closed at
  once (uvicorn's `limit_concurrency` would keep it open and refuse only its requests);
- a drain deadline: when the proxy answered before the client finished its body (a 401, a 405,
  a 413), the rest must arrive within `server.body_timeout_seconds`; otherwise a client could
  hold the connection by dripping bytes the proxy discards.

It also sends what one turn of the event loop writes in one send (`OneSendPerTurn`): a
response's head with its body, several events of a stream together, where uvicorn makes a send
per ASGI message; a complete response goes at once.

The body itself, while the app reads it, is timed by `proxy.server.chat_request.read_body`. Nothing
here runs while a response is being sent: the limits are on the client's request only.

It relies on the protocol's internals (its per-connection state and parser callbacks), which
uvicorn changes between minors: tests/test_third_party_internals.py names what it uses and
fails, saying what moved, the day an upgrade breaks one.

The limits come from the uvicorn Config (`client_limits`, see proxy/server/serving.py), which
uvicorn also pickles to worker processes. Only httptools is subclassed: it is a dependency of the
proxy (pyproject.toml), so uvicorn's h11 fallback is never chosen for `streamfix serve`.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from proxy.server.errors import error_body
from proxy.server.response_writes import OneSendPerTurn
from proxy.settings.schema import ServerSettings
from proxy.wire import json_codec


class ClientLimitsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a head deadline, a head size cap, a connection cap and a drain
    deadline (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._writes: OneSendPerTurn | None = None
        # uvicorn's protocol logs as "uvicorn.error", which reads as an error of the proxy's.
        self.logger = logging.getLogger(__name__)
        limits: ServerSettings = getattr(config, "client_limits", None) or ServerSettings()
        self._header_timeout = limits.header_timeout_seconds
        self._max_header_bytes = limits.max_header_bytes
        self._drain_timeout = limits.body_timeout_seconds
        self._max_connections = limits.max_connections
        self._deadline: asyncio.TimerHandle | None = None
        self._draining = False  # answered; the rest of the request body is still to come
        self._head_expected = True  # the next bytes belong to a request head
        self._head_begun = False  # the parser has seen the first byte of that head
        self._head_bytes = 0

    # ── connection ──────────────────────────────────────────────────────────

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # What one turn of the loop writes leaves in one send (proxy/server/response_writes.py).
        self._writes = self.transport = OneSendPerTurn(transport, self.loop)
        if len(self.connections) > self._max_connections:
            # Answered before any request: an HTTP client reads it as the answer to the request
            # it sends (or sees the connection close); either way it learns at once.
            self._answer_and_close(
                503,
                f"streamfix has too many open connections (limit {self._max_connections}); "
                "retry later",
                "too_many_connections",
                "server_error",
            )
            return
        self._set_deadline(self._header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Counted before parsing: httptools buffers a header's name and value itself until
        # they are complete, so the callbacks would see an oversized header only at its end.
        if self._head_expected:
            self._head_bytes += len(data)
        super().data_received(data)
        if (
            self._head_expected
            and self._head_bytes > self._max_header_bytes
            and not self.transport.is_closing()
        ):
            self._answer_and_close(
                431,
                f"request head exceeds {self._max_header_bytes} bytes",
                "request_header_too_large",
            )

    # ── parser callbacks ────────────────────────────────────────────────────

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        if self._deadline is None:  # a fresh connection's deadline runs from connection_made
            self._set_deadline(self._header_timeout, self._head_timed_out)

    def on_headers_complete(self) -> None:
        self._clear_deadline()
        self._head_expected = self._head_begun = False
        self._head_bytes = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_expected = True
        if self._draining:
            # The discarded rest has arrived: the connection is idle again, and uvicorn's
            # keep-alive timer (cancelled by each of those bytes) has to be armed anew.
            self._draining = False
            self._clear_deadline()
            if not self.transport.is_closing() and self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )

    def on_response_complete(self) -> None:
        if self._writes is not None:
            self._writes.flush()  # a whole response waits for nothing more
        super().on_response_complete()
        cycle = self.cycle
        if (
            cycle is not None
            and cycle.response_complete
            and cycle.more_body
            and not self.transport.is_closing()
        ):
            self._draining = True
            self._set_deadline(self._drain_timeout, self._drain_timed_out)

    # ── deadlines ───────────────────────────────────────────────────────────

    def _head_timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if not self._responding():
            if self._head_begun:
                self._answer_and_close(
                    408,
                    f"request head not received within {self._header_timeout:g} s",
                    "request_timeout",
                )
            else:
                self.transport.close()  # nothing asked, nothing to answer
            return
        # A pipelined head is late while an earlier answer is still going out: that answer is
        # the client's, so it finishes, and the connection closes after it.
        self.cycle.keep_alive = False

    def _drain_timed_out(self) -> None:
        self._deadline = None
        self._draining = False
        if not self.transport.is_closing():
            self.transport.close()  # the answer went out already

    def _set_deadline(self, delay: float, callback: Callable[[], None]) -> None:
        self._clear_deadline()
        self._deadline = self.loop.call_later(delay, callback)

    def _clear_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # ── answers ─────────────────────────────────────────────────────────────

    def _responding(self) -> bool:
        """An answer to an earlier request is being prepared or sent on this connection."""
        return self.cycle is not None and not self.cycle.response_complete

    def _answer_and_close(
        self, status: int, message: str, code: str, type_: str = "invalid_request_error"
    ) -> None:
        """An error in OpenAI's format, then close; only the close while another answer is out."""
        if not self._responding():
            # default_headers: the server and date headers uvicorn puts on every response.
            defaults = self.server_state.default_headers
            self.transport.write(_error_message(status, message, code, type_, defaults))
        self.transport.close()


def _error_message(
    status: int, message: str, code: str, type_: str, defaults: list[tuple[bytes, bytes]]
) -> bytes:
    body = json_codec.dumps(error_body(message, type_, code))
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}".encode()]
    lines += [name + b": " + value for name, value in defaults]
    lines += [
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    if status == 503:
        lines.append(b"retry-after: 1")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
