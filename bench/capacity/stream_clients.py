"""The capacity bench's client: many slow streams from one process, each event's lag measured.

A raw `asyncio.Protocol` per connection on uvloop, no StreamReader, no HTTP library: holding
5,000 streams and reading 5,000 events a second costs this process a few percent of a core, so
what it measures is the server's delay, not its own. Each connection sends one pre-built
streamed chat request and reads the answer; for every `@<t>@` stamp that arrives (written by
bench/capacity/clock_upstream.py, `time.monotonic()` at its write) the lag is the time of this
read less t, on the machine's one monotonic clock. Connections open at `--rate` per second, or
all at once with 0; each is timed from the moment it was due (so a slow accept counts).

    python bench/capacity/stream_clients.py --port P --streams 5000 --rate 500 --model M \
        --events 30 --out samples.json --deadline 120

Writes to `--out` a JSON object: per stream its head time and status; every event's write time
and lag; errors by kind; then exits 0. It ends by itself at `--deadline` seconds, closing what
is still open (those streams count as `unfinished`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import socket
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf_fake import run

STAMP = re.compile(rb"@(\d+\.\d+)@")
CARRY = 32  # a stamp cut between two reads is found in the previous read's tail plus this one
now = time.monotonic


class Samples:
    def __init__(self) -> None:
        self.written = array("d")  # the upstream's write time of each event read
        self.lag = array("d")  # read time less write time, seconds
        self.heads = array("d")  # seconds from a stream's due time to its response head
        self.errors: dict[str, int] = {}
        self.finished = 0
        self.opened = 0  # response heads received
        self.events_short = 0  # finished streams with fewer stamps than events
        self.first_opened = 0.0  # when the first response head arrived
        self.last_opened = 0.0  # when the last one did

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class Stream(asyncio.Protocol):
    __slots__ = (
        "carry",
        "done",
        "due",
        "events",
        "expected",
        "head",
        "request",
        "samples",
        "status",
        "transport",
    )

    def __init__(
        self, samples: Samples, request: bytes, due: float, expected: int, done: asyncio.Future
    ) -> None:
        self.samples = samples
        self.request = request
        self.due = due
        self.expected = expected
        self.done = done
        self.events = 0
        self.head = b""
        self.carry = b""
        self.status = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        read_at = now()
        if not self.status:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(self.head[9:12])
            self.samples.heads.append(read_at - self.due)
            data = self.head[end + 4 :]
            self.head = b""
            if self.status != 200:
                self.finish(f"status {self.status}")
                return
            self.samples.opened += 1
            self.samples.last_opened = read_at
            if not self.samples.first_opened:
                self.samples.first_opened = read_at
        text = self.carry + data
        skip = len(self.carry)
        for match in STAMP.finditer(text):
            if match.end() <= skip:
                continue  # found in the previous read already
            written = float(match[1])
            self.samples.written.append(written)
            self.samples.lag.append(read_at - written)
            self.events += 1
        self.carry = text[-CARRY:]
        if b"data: [DONE]" in text:
            self.finish(None)

    def finish(self, error: str | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.samples.finished += 1
            if self.events < self.expected:
                self.samples.events_short += 1
        else:
            self.samples.error(error)
        self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.finish("closed early" if self.status else "closed before the head")


def request_bytes(port: int, model: str) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Count slowly."}],
            "stream": True,
        },
        separators=(",", ":"),
    ).encode()
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        "content-type: application/json\r\naccept: text/event-stream\r\n"
        "authorization: Bearer sk-capacity-0000\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def one(samples: Samples, port: int, request: bytes, due: float, expected: int) -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    try:
        await loop.create_connection(
            lambda: Stream(samples, request, due, expected, done), "127.0.0.1", port
        )
    except OSError as exc:
        samples.error(f"connect: {exc.strerror or type(exc).__name__}")
        return
    await done


async def main_async(args: argparse.Namespace) -> Samples:
    samples = Samples()
    request = request_bytes(args.port, args.model)
    tasks = []
    start = now()
    stop_at = start + args.deadline
    for number in range(args.streams):
        due = start + (number / args.rate if args.rate > 0 else 0.0)
        wait = due - now()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.ensure_future(one(samples, args.port, request, due, args.events)))
        if now() > stop_at:
            break
    pending = {t for t in tasks if not t.done()}
    if pending:
        _, pending = await asyncio.wait(pending, timeout=max(0.0, stop_at - now()))
    for task in pending:
        task.cancel()
    if pending:
        samples.errors["unfinished"] = len(pending)
    await asyncio.gather(*pending, return_exceptions=True)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0, help="streams opened a second; 0: all")
    parser.add_argument("--model", required=True)
    parser.add_argument("--events", type=int, required=True, help="events each stream carries")
    parser.add_argument("--deadline", type=float, required=True, help="seconds, then stop")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, args.streams + 64):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.streams + 64), hard))
    samples = run(main_async(args))
    Path(args.out).write_text(
        json.dumps(
            {
                "streams": args.streams,
                "opened": samples.opened,
                "finished": samples.finished,
                "events_short": samples.events_short,
                "first_opened": samples.first_opened,
                "last_opened": samples.last_opened,
                "errors": samples.errors,
                "heads": samples.heads.tolist(),
                "written": samples.written.tolist(),
                "lag": samples.lag.tolist(),
            }
        )
    )


if __name__ == "__main__":
    main()
