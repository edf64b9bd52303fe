"""A raw upstream: a bounded raw-TCP server on 127.0.0.1 that reads one request and sends exactly
the bytes a test scripts (a `Reply`), for upstreams the transcript fake cannot play: one that
accepts and never answers, drops the connection mid-stream, sends a non-SSE body on a stream
request or a 20 MiB event; and the SSE events such upstreams send."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass
class RawRequest:
    head: bytes
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Reply:
    """What a RawUpstream does with one request: wait `wait` seconds, send `pieces` (pausing
    `pause` seconds after each), then `end`: "close" (FIN), "reset" (RST) or "hang" (keep the
    connection open and silent until the test ends)."""

    pieces: Iterable[bytes] = ()
    end: str = "close"
    wait: float = 0.0
    pause: float = 0.0


def http_head(content_type: str | None = "text/event-stream", status: int = 200) -> bytes:
    """A response head with a chunked body (so a dropped connection is detectably incomplete)."""
    lines = [f"HTTP/1.1 {status} OK", "transfer-encoding: chunked", "connection: close"]
    if content_type:
        lines.append(f"content-type: {content_type}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def content_length(head: bytes) -> int:
    """A request head's Content-Length (the last one, if several), 0 without one."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return length


def chunked(content_type: str | None, parts: Iterable[bytes]) -> list[bytes]:
    """A complete chunked response: head, one HTTP chunk per part, the last chunk."""
    return [http_head(content_type), *(http_chunk(p) for p in parts), LAST_CHUNK]


class RawUpstream:
    """A raw-TCP upstream on 127.0.0.1. For each connection: reads one request (head and a
    Content-Length body), records it, and plays `reply(request)`. Bounded: every socket has a
    timeout and hanging connections are released when the context exits."""

    def __init__(self, reply: Callable[[RawRequest], Reply]) -> None:
        self.reply = reply
        self.requests: list[RawRequest] = []
        self.sent: list[int] = []  # bytes sent, per finished connection
        self.stopping = threading.Event()
        upstream = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                upstream._handle(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> RawUpstream:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, sock: socket.socket) -> None:
        sock.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            received = sock.recv(65536)
            if not received:
                return
            data += received
        head, _, body = data.partition(b"\r\n\r\n")
        length = content_length(head)
        while len(body) < length:
            received = sock.recv(65536)
            if not received:
                break
            body += received
        request = RawRequest(head, body)
        self.requests.append(request)
        reply = self.reply(request)
        self.stopping.wait(reply.wait)
        sent = 0
        try:
            for piece in reply.pieces:
                sock.sendall(piece)
                sent += len(piece)
                if reply.pause:
                    self.stopping.wait(reply.pause)
        except OSError:
            pass  # the proxy went away: what we measure in `sent`
        finally:
            self.sent.append(sent)
        if reply.end == "hang":
            self.stopping.wait(30)
        elif reply.end == "reset":
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        sock.close()


@contextmanager
def raw_upstream(reply: Callable[[RawRequest], Reply] | Reply) -> Iterator[RawUpstream]:
    with RawUpstream(reply if callable(reply) else lambda _: reply) as upstream:
        yield upstream


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def delta_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return sse({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


# Gemini-style: `role` on every delta, which the proxy strips after the first.
TEXT_EVENTS = [
    delta_chunk({"role": "assistant", "content": "Hel"}),
    delta_chunk({"role": "assistant", "content": "lo"}),
    delta_chunk({"role": "assistant", "content": " world"}),
]
