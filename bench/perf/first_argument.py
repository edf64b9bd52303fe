"""Phase first_argument: the time to the first argument byte of a 20 KB tool call, direct and
through streamfix (issue 26, part 2).

A client that shows tool input as it streams (a file being written, a long command) sees the
call grow only if its argument fragments reach it as they are generated. The upstream here is
OpenAI-shaped (an opening delta with index, id, type and name, then 400 argument fragments of
~51 bytes, 2 ms apart: about a second of generation): streamfix with its default emission
(`auto`) relays them as received, so its first argument byte should come within a millisecond
or so of direct; with `tool_calls.emit = "atomic"` it comes only once the call is whole.

It starts its own upstream (in this process, on its own event loop thread) and its two
streamfix servers, so it needs none of the other phases' targets:

    python bench/perf.py --phase first_argument
"""

from __future__ import annotations

import asyncio
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from perf_procs import HOST, free_port, stop

from .config import progress
from .servers import Target, start_streamfix, wait_ready

FRAGMENTS = 400
FRAGMENT_PAUSE = 0.002
ROUNDS = 9
CONTENT = ("All work and no play makes Jack a dull boy. " * 460)[: 20_000 - 40]
ARGUMENTS = orjson.dumps({"path": "notes.md", "content": CONTENT}).decode()
FIRST_ARGUMENT = re.compile(rb'"arguments":"[^"]')
"""An argument fragment with text in it (the opening delta's `"arguments":""` does not count)."""
CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "streamfix": {},  # the defaults: emit = "auto"
    "streamfix-atomic": {"tool_calls": {"emit": "atomic"}},
}


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-first0000",
        "object": "chat.completion.chunk",
        "created": 1_764_921_600,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def answer_events() -> list[bytes]:
    size = -(-len(ARGUMENTS) // FRAGMENTS)
    opening = {"index": 0, "id": "call_first", "type": "function"}
    opening["function"] = {"name": "write_file", "arguments": ""}
    events = [_event({"role": "assistant", "content": None, "tool_calls": [opening]})]
    for start in range(0, len(ARGUMENTS), size):
        piece = {"index": 0, "function": {"arguments": ARGUMENTS[start : start + size]}}
        events.append(_event({"tool_calls": [piece]}))
    events += [_event({}, "tool_calls"), b"data: [DONE]\n\n"]
    return events


def _http_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return head


class Upstream:
    """The OpenAI-shaped upstream, generating the call's fragments FRAGMENT_PAUSE apart."""

    def __init__(self) -> None:
        self.port = free_port()
        self.events = answer_events()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()

    def __enter__(self) -> Upstream:
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, HOST, self.port))
        self._ready.set()
        self.loop.run_forever()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await _read_request(reader)
                if head.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for number, event in enumerate(self.events):
                    if 1 < number <= FRAGMENTS + 1:
                        await asyncio.sleep(FRAGMENT_PAUSE)  # generating the next fragment
                    writer.write(_http_chunk(event))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def one_exchange(port: int) -> tuple[float, float]:
    """Seconds to the first argument byte and to the end of the stream."""
    body = orjson.dumps(
        {
            "model": "gpt-4.1",
            "stream": True,
            "messages": [{"role": "user", "content": "Write the notes."}],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "write_file",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "path": {"type": "string"},
                                "content": {"type": "string"},
                            },
                        },
                    },
                }
            ],
        }
    )
    reader, writer = await asyncio.open_connection(HOST, port)
    started = time.perf_counter()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\nauthorization: Bearer sk-perf\r\n"
        b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    seen = b""
    first = None
    while data := await asyncio.wait_for(reader.read(65536), 30):
        seen += data
        if first is None and FIRST_ARGUMENT.search(seen):
            first = time.perf_counter() - started
        if b"data: [DONE]" in seen[-64:]:
            break
    total = time.perf_counter() - started
    writer.close()
    if first is None or b"data: [DONE]" not in seen:
        raise RuntimeError(f"port {port}: no argument text or no [DONE] in the answer")
    return first, total


def phase_first_argument(work: Path) -> dict[str, Any]:
    results: dict[str, Any] = {
        "arguments_bytes": len(ARGUMENTS),
        "fragments": FRAGMENTS,
        "fragment_pause_ms": FRAGMENT_PAUSE * 1000,
        "rounds": ROUNDS,
        "targets": {},
    }
    with Upstream() as upstream:
        url = f"http://{HOST}:{upstream.port}/v1"
        servers = [
            start_streamfix(f"first-{name}", free_port(), url, config, work)
            for name, config in CONFIGS.items()
        ]
        try:
            for server in servers:
                wait_ready(server, 30)
            targets = [Target("direct", upstream.port), *servers]
            names = ["direct", *CONFIGS]
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
            progress(f"first argument byte: {ROUNDS} rounds through {', '.join(names)}")
            for _ in range(ROUNDS + 1):  # the first round warms every target up
                for name, target in zip(names, targets, strict=True):
                    samples[name].append(asyncio.run(one_exchange(target.port)))
            for name in names:
                kept = samples[name][1:]
                results["targets"][name] = {
                    "first_argument_ms": statistics.median(s[0] for s in kept) * 1000,
                    "stream_ms": statistics.median(s[1] for s in kept) * 1000,
                }
        finally:
            for server in servers:
                stop(server.process)
    return results


def first_argument_lines(results: dict[str, Any]) -> list[str]:
    direct = results["targets"]["direct"]["first_argument_ms"]
    lines = [
        f"first argument byte of a {results['arguments_bytes'] / 1000:.0f} KB call "
        f"({results['fragments']} fragments, {results['fragment_pause_ms']:.0f} ms apart), "
        f"median of {results['rounds']}:"
    ]
    for name, figures in results["targets"].items():
        added = figures["first_argument_ms"] - direct
        lines.append(
            f"  {name:<18} first argument {figures['first_argument_ms']:8.1f} ms "
            f"({added:+8.1f} ms against direct), whole stream {figures['stream_ms']:8.1f} ms"
        )
    return lines


if __name__ == "__main__":
    import tempfile

    print("\n".join(first_argument_lines(phase_first_argument(Path(tempfile.mkdtemp())))))
