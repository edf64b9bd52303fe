"""A raw-TCP upstream on 127.0.0.1 that keeps connections alive, for the upstream client's
retry rule: which request reached the upstream on which connection, and how each connection
ended (a FIN, a reset, a keep-alive timeout).

It runs in threads, not on the test's event loop, so a test can block its own loop (to leave a
FIN unread in the kernel) while the upstream goes on. Bounded: every socket has a timeout and
the open ones are shut down when the context exits.
"""

from __future__ import annotations

import select
import socket
import socketserver
import ssl
import struct
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

from tests.support.raw_upstream import content_length

SOCKET_TIMEOUT = 10.0


@dataclass(frozen=True)
class Received:
    connection: int  # 0 for the first connection the upstream accepted
    number: int  # 0 for the first request on that connection
    head: bytes
    body: bytes

    @property
    def method(self) -> str:
        return self.head.split(b" ", 1)[0].decode("ascii")


@dataclass(frozen=True)
class Answer:
    """What the upstream does with one request it has read whole: wait `wait` seconds, send
    `pieces`, then `end`: "keep" (read the next request), "idle_close" (read the next request
    if its first byte comes within `idle` seconds, else close: a server's keep-alive timeout),
    "close" (FIN) or "reset" (RST)."""

    pieces: Sequence[bytes] = ()
    wait: float = 0.0
    end: str = "keep"
    idle: float = 0.05


Script = Callable[[Received], Answer]


def ok(body: bytes = b"ok", content_type: bytes = b"application/json") -> bytes:
    """A whole keep-alive response (no Connection: close)."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (content_type, len(body)) + body


@dataclass
class KeepAliveUpstream:
    script: Script
    ssl_context: ssl.SSLContext | None = None
    received: list[Received] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self._stopping = threading.Event()
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        upstream = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                upstream._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        scheme = "https" if self.ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> KeepAliveUpstream:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for sock in self._open:
                with suppress(OSError):  # closed already
                    sock.shutdown(socket.SHUT_RDWR)

    def on(self, connection: int) -> list[Received]:
        return [request for request in self.received if request.connection == connection]

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            index = self.connections
            self.connections += 1
            self._open.append(sock)
        sock.settimeout(SOCKET_TIMEOUT)
        try:
            if self.ssl_context is not None:
                sock = self.ssl_context.wrap_socket(sock, server_side=True)
            self._converse(sock, index)
        finally:
            sock.close()  # here, not by socketserver: its shutdown(SHUT_WR) would send a FIN first

    def _converse(self, sock: socket.socket, index: int) -> None:
        reader = _Reader(sock)
        idle: float | None = None
        number = 0
        while not self._stopping.is_set():
            if idle is not None and not reader.readable_within(idle):
                return  # the keep-alive timeout: closed without reading anything
            request = reader.request(index, number)
            if request is None:
                return
            self.received.append(request)
            number += 1
            answer = self.script(request)
            if not self._play(sock, answer):
                return
            idle = answer.idle if answer.end == "idle_close" else None

    def _play(self, sock: socket.socket, answer: Answer) -> bool:
        """Sends the answer; False once the connection is to end."""
        self._stopping.wait(answer.wait)
        try:
            for piece in answer.pieces:
                sock.sendall(piece)
        except OSError:
            return False
        if answer.end == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return answer.end in ("keep", "idle_close")


class _Reader:
    """Whole requests (head and Content-Length body) off one socket, bytes kept between them."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def readable_within(self, seconds: float) -> bool:
        if self._buffer or (isinstance(self._sock, ssl.SSLSocket) and self._sock.pending()):
            return True
        readable, _, _ = select.select([self._sock], [], [], seconds)
        return bool(readable)

    def request(self, connection: int, number: int) -> Received | None:
        while b"\r\n\r\n" not in self._buffer:
            if not self._more():
                return None
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        length = content_length(head)
        self._buffer = rest
        while len(self._buffer) < length:
            if not self._more():
                return None
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return Received(connection, number, head, body)

    def _more(self) -> bool:
        try:
            data = self._sock.recv(65536)
        except OSError:
            return False
        self._buffer += data
        return bool(data)
