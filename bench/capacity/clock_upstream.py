"""The slow upstream of the capacity bench: many long streams, each event stamped with the time of
its write.

A raw-asyncio HTTP/1.1 server (an `asyncio.Protocol` on uvloop, as bench/perf_fake.py), so that
holding 10,000 streams costs it a timer and a few objects each: no task per stream, no framework.
`POST .../chat/completions` with `"stream": true` and a model named `<anything>-<n>x<ms>` gets n
chat completion chunks, one every ms milliseconds, scheduled from the request's arrival (so
streams do not drift), then `data: [DONE]`. Each chunk's `content` is `@<t>@ ` where t is
`time.monotonic()` just before the write: CLOCK_MONOTONIC, the one clock every process on the
machine shares, so a client can subtract it from its own reading. The head goes out with the
first event. Anything else is 404 (or 400 for a body it cannot read). `GET /health` answers 200,
`GET /stats` counts open and finished streams.

    python bench/capacity/clock_upstream.py --port 9000
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import ClassVar

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf_fake import run

MODEL = re.compile(r"-(\d+)x(\d+)$")
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
DONE = b"data: [DONE]\n\n"
END = b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
BAD = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
OK = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n"
    b'{"status":"ok"}'
)
STATS = {"open": 0, "finished": 0, "cut": 0}


def chunk_template(model: str) -> tuple[bytes, bytes, bytes]:
    """(first, middle, last) events with `%s` where the stamp goes; the last carries usage."""

    def event(delta: dict, finish: str | None = None, **extra: object) -> bytes:
        body = {
            "id": "chatcmpl-capacity00000000000000",
            "object": "chat.completion.chunk",
            "created": 1_774_894_020,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return b"data: " + orjson.dumps(body).replace(b"STAMP", b"%s") + b"\n\n"

    usage = {"prompt_tokens": 30, "completion_tokens": 30, "total_tokens": 60}
    return (
        event({"role": "assistant", "content": "@STAMP@ "}),
        event({"content": "@STAMP@ "}),
        event({"content": "@STAMP@ "}, "stop", usage=usage),
    )


class ClockStream(asyncio.Protocol):
    """One connection: requests answered in order, one stream at a time."""

    templates: ClassVar[dict[str, tuple[bytes, bytes, bytes]]] = {}

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.timer: asyncio.TimerHandle | None = None
        self.streaming = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.streaming:
            STATS["open"] -= 1
            STATS["cut"] += 1
            self.streaming = False
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.serve()

    def serve(self) -> None:
        while not self.streaming and self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            method, target = ([*head[0].split(" "), "", ""])[:2]
            self.answer(method, target.split("?", 1)[0], body)

    def answer(self, method: str, path: str, body: bytes) -> None:
        assert self.transport is not None
        if method == "GET" and path in ("/health", "/healthz"):
            self.transport.write(OK)
            return
        if method == "GET" and path == "/stats":
            stats = orjson.dumps(STATS)
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(stats), stats)
            )
            return
        if method != "POST" or not path.endswith("/chat/completions"):
            self.transport.write(NOT_FOUND)
            return
        try:
            request = orjson.loads(body)
            model = str(request["model"])
            match = MODEL.search(model)
        except (orjson.JSONDecodeError, KeyError, TypeError):
            match = None
        if match is None or not request.get("stream"):
            self.transport.write(BAD)
            self.transport.close()
            return
        templates = self.templates.get(model)
        if templates is None:
            templates = self.templates[model] = chunk_template(model)
        self.streaming = True
        STATS["open"] += 1
        self.write_event(templates, int(match[1]), int(match[2]) / 1000, 0, self.loop.time())

    def write_event(
        self, templates: tuple[bytes, bytes, bytes], count: int, gap: float, number: int, t0: float
    ) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            return
        first, middle, last = templates
        template = first if number == 0 else last if number == count - 1 else middle
        event = template % (b"%.6f" % time.monotonic())
        framed = b"%x\r\n%s\r\n" % (len(event), event)
        if number == 0:
            framed = HEAD + framed
        if number == count - 1:
            self.transport.write(framed + END)
            self.streaming = False
            STATS["open"] -= 1
            STATS["finished"] += 1
            if self.buffer:
                self.serve()
            return
        self.transport.write(framed)
        self.timer = self.loop.call_at(
            t0 + (number + 1) * gap, self.write_event, templates, count, gap, number + 1, t0
        )


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    # The kernel caps the backlog at net.core.somaxconn; ask for the most it allows.
    server = await loop.create_server(ClockStream, "127.0.0.1", port, backlog=65535)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    run(serve(args.port))


if __name__ == "__main__":
    main()
