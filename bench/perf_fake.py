"""The fake upstream for bench/perf.py: a raw-asyncio HTTP/1.1 server, as cheap as it can be.

One process, one event loop (uvloop when installed), `asyncio.Protocol` callbacks: no framework,
no per-request allocation beyond parsing the request line, the headers and the body's `model`.
Keep-alive; JSON answers with Content-Length; streams with chunked transfer encoding, one SSE
event per chunk and per `transport.write`.

What is answered is chosen by the request's `model`, the one field every proxy forwards as is:

    <anything>-<kind>-<n>[-d<ms>]

- `kind` `text`: n events of plain text (role on the first delta, finish "stop" on the last);
- `kind` `gtools`: n events of Gemini-style tool calls: indexless entries, `role` on every
  delta, call ids and names on each call's first entry and its argument text spread over the
  following entries, a thought signature on the first call, finish "stop" (not "tool_calls");
- `kind` `otools`: n events of OpenAI-style fragmented tool calls: indexed entries, the first
  with id/type/name and empty arguments, then many small argument fragments; finish
  "tool_calls";
- `kind` `hermes`: n events of plain text whose last text events carry a Hermes tool call
  written as content (`<tool_call>{"name": "read_file", …}</tool_call>`, cut in pieces), finish
  "stop": what a server whose tool parser missed sends (the recogniser phase checks with it
  that the recogniser is on where it should be);
- `kind` `json` (or any kind with `"stream": false`): one non-streamed completion;
- `-d<ms>`: sleep that long between events (only the memory phase uses it, to hold streams open).

Every answer to the same model is the same bytes (built once, cached): nothing varies per
request. `GET /health` answers 200; `GET /stats` counts requests and open streams. Events are
written one `transport.write` each; between events the writer yields to the event loop once
(`--writes yield`, the default: concurrent streams interleave the way real upstreams' do) or
not at all (`--writes burst`).

    python bench/perf_fake.py --port 9000 [--writes yield|burst]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import re
import signal
import socket
from typing import Any

import orjson

MODEL = re.compile(r"(text|gtools|otools|hermes|json)-(\d+)(?:-d(\d+))?$")
CREATED = 1_774_894_020
SIGNATURE = "CnsBVKhY3Q0wVb6kU9yR3nX8mZ1aD4eF7gJ0hK2lP5oS8qT1uW4vY7zA0cB3dE6fG9hI2jK5lM8nO1" * 2
WORDS = ("The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog. ")
TOOLS = ("read_file", "write_file", "search_code", "run_tests")
USAGE = {"prompt_tokens": 402, "completion_tokens": 50, "total_tokens": 452}


# ── what is sent ─────────────────────────────────────────────────────────────


def _envelope(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-perf0000000000000000",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
    }


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _event({**_envelope(model), "choices": [choice], **extra})


def text_events(model: str, n: int) -> list[bytes]:
    events = [_chunk(model, {"role": "assistant", "content": WORDS[0]})]
    events += [_chunk(model, {"content": WORDS[i % len(WORDS)]}) for i in range(1, n - 1)]
    events.append(_chunk(model, {}, "stop", usage=USAGE))
    return events[:n]


HERMES_CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'


def hermes_events(model: str, n: int) -> list[bytes]:
    """Plain text, then HERMES_CALL in 8-character pieces as content, finish "stop"."""
    markup = [HERMES_CALL[i : i + 8] for i in range(0, len(HERMES_CALL), 8)]
    words = max(1, n - 1 - len(markup))
    events = [_chunk(model, {"role": "assistant", "content": WORDS[0]})]
    events += [_chunk(model, {"content": WORDS[i % len(WORDS)]}) for i in range(1, words)]
    events += [_chunk(model, {"content": piece}) for piece in markup]
    events.append(_chunk(model, {}, "stop", usage=USAGE))
    return events


def _arguments(call: int, pieces: int) -> list[str]:
    """A JSON object's text cut into `pieces` fragments (at least one character each)."""
    body = orjson.dumps(
        {"path": f"/src/module_{call}/main.py", "content": "x = 1\n" * max(pieces, 4)}
    ).decode()
    pieces = max(1, min(pieces, len(body)))
    step = len(body) / pieces
    cuts = [round(i * step) for i in range(pieces)] + [len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts)]


def _calls_plan(n: int) -> list[int]:
    """How many argument events each call gets, for n - 1 events before the finish."""
    body = n - 1
    calls = max(1, min(len(TOOLS), body // 8))
    share, rest = divmod(body, calls)
    return [share + (1 if i < rest else 0) for i in range(calls)]


def gemini_tool_events(model: str, n: int) -> list[bytes]:
    """Gemini's OpenAI-compatible shape: no `index`, `role` on every delta, a signature on the
    first call only, arguments over indexless deltas, and finish "stop"."""
    events = []
    for call, count in enumerate(_calls_plan(n)):
        fragments = _arguments(call, count)
        entry: dict[str, Any] = {
            "function": {"arguments": fragments[0], "name": TOOLS[call]},
            "id": f"function-call-{call:016d}",
            "type": "function",
        }
        if call == 0:
            entry["extra_content"] = {"google": {"thought_signature": SIGNATURE}}
        events.append(_chunk(model, {"role": "assistant", "tool_calls": [entry]}))
        for fragment in fragments[1:]:
            piece = {"function": {"arguments": fragment}}
            events.append(_chunk(model, {"role": "assistant", "tool_calls": [piece]}))
    events.append(_chunk(model, {"role": "assistant"}, "stop", usage=USAGE))
    return events


def openai_tool_events(model: str, n: int) -> list[bytes]:
    """OpenAI's shape: indexed entries, identity on an opening entry with empty arguments,
    then small argument fragments; finish "tool_calls"."""
    events = []
    for call, count in enumerate(_calls_plan(n)):
        opening = {
            "index": call,
            "id": f"call_{call:024d}",
            "type": "function",
            "function": {"name": TOOLS[call], "arguments": ""},
        }
        delta: dict[str, Any] = {"tool_calls": [opening]}
        if call == 0:
            delta = {"role": "assistant", "content": None, **delta}
        events.append(_chunk(model, delta))
        for fragment in _arguments(call, count - 1) if count > 1 else ():
            piece = {"index": call, "function": {"arguments": fragment}}
            events.append(_chunk(model, {"tool_calls": [piece]}))
    events.append(_chunk(model, {}, "tool_calls", usage=USAGE))
    return events


def expected_calls(model: str) -> list[dict[str, Any]]:
    """The calls a tool stream for `model` carries, as a client should end up with them:
    `id`, `name`, `arguments` (text) and `signature` (or None), in order."""
    match = MODEL.search(model)
    assert match is not None and match[1] in ("gtools", "otools"), model
    gemini = match[1] == "gtools"
    calls = []
    for call, count in enumerate(_calls_plan(max(2, int(match[2])))):
        pieces = count if gemini else max(count - 1, 1)
        calls.append(
            {
                "id": f"function-call-{call:016d}" if gemini else f"call_{call:024d}",
                "name": TOOLS[call],
                "arguments": "".join(_arguments(call, pieces)) if gemini or count > 1 else "",
                "signature": SIGNATURE if gemini and call == 0 else None,
            }
        )
    return calls


def completion(model: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-perf0000000000000000",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(WORDS) * 4},
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    )


def events_for(model: str) -> list[bytes] | None:
    """The SSE events (without [DONE]) served for `model`, or None for a JSON completion."""
    match = MODEL.search(model)
    if match is None or match[1] == "json":
        return None
    kind, n = match[1], max(2, int(match[2]))
    build = {
        "text": text_events,
        "gtools": gemini_tool_events,
        "otools": openai_tool_events,
        "hermes": hermes_events,
    }
    return build[kind](model, n)


def delay_of(model: str) -> float:
    match = MODEL.search(model)
    return int(match[3]) / 1000 if match and match[3] else 0.0


# ── HTTP/1.1 ─────────────────────────────────────────────────────────────────

DONE = b"data: [DONE]\n\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
BAD = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nbad"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
OK = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n"
    b'{"status":"ok"}'
)
MODELS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 28\r\n\r\n"
    b'{"object":"list","data":[]}\n'
)


STATS = {"requests": 0, "open_streams": 0}
"""`GET /stats`: requests answered, and streams being written right now."""


def _framed(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


class Answers:
    """Per model: the framed stream chunks, or the whole JSON response; built once."""

    def __init__(self) -> None:
        self._streams: dict[str, list[bytes]] = {}
        self._json: dict[str, bytes] = {}

    def stream(self, model: str) -> list[bytes] | None:
        framed = self._streams.get(model)
        if framed is None:
            events = events_for(model)
            if events is None:
                return None
            framed = [_framed(e) for e in events] + [_framed(DONE) + b"0\r\n\r\n"]
            framed[0] = SSE_HEAD + framed[0]
            self._streams[model] = framed
        return framed

    def json(self, model: str) -> bytes:
        answer = self._json.get(model)
        if answer is None:
            body = completion(model)
            answer = (
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            self._json[model] = answer
        return answer


class FakeUpstream(asyncio.Protocol):
    answers = Answers()
    burst = False

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy: asyncio.Task | None = None  # the stream being written
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.can_write.set()
        if self.busy is not None:
            self.busy.cancel()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.busy is None:
            self._serve_buffered()

    def _serve_buffered(self) -> None:
        """Answer every complete request in the buffer, in order (a stream pauses the loop)."""
        while self.busy is None and not self.closed:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, _ = lines[0].split(" ", 2)
            except ValueError:
                self._fail()
                return
            length = 0
            close = False
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
                elif name == "transfer-encoding":
                    self._fail()  # no client in this benchmark sends a chunked request
                    return
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            self._answer(method, target, body)
            if close:
                self._close_after_write()

    def _answer(self, method: str, target: str, body: bytes) -> None:
        assert self.transport is not None
        path = target.split("?", 1)[0]
        if method == "GET":
            if path in ("/health", "/healthz"):
                self.transport.write(OK)
            elif path == "/stats":
                stats = orjson.dumps(STATS)
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(stats), stats)
                )
            elif path.endswith("/models"):
                self.transport.write(MODELS)
            else:
                self.transport.write(NOT_FOUND)
            return
        if not path.endswith("/chat/completions"):
            self.transport.write(NOT_FOUND)
            return
        try:
            request = orjson.loads(body)
            model = str(request["model"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.transport.write(BAD)
            return
        STATS["requests"] += 1
        chunks = self.answers.stream(model) if request.get("stream") else None
        if chunks is None:
            self.transport.write(self.answers.json(model))
            return
        delay = delay_of(model)
        if self.burst and not delay:
            for chunk in chunks:
                self.transport.write(chunk)
            return
        self.busy = asyncio.get_running_loop().create_task(self._stream(chunks, delay))

    async def _stream(self, chunks: list[bytes], delay: float) -> None:
        assert self.transport is not None
        STATS["open_streams"] += 1
        try:
            for number, chunk in enumerate(chunks):
                if number:
                    await asyncio.sleep(delay)  # delay 0: one turn of the event loop
                if not self.can_write.is_set():
                    await self.can_write.wait()
                if self.closed:
                    return
                self.transport.write(chunk)
        except asyncio.CancelledError:
            return
        finally:
            STATS["open_streams"] -= 1
            self.busy = None
        if self.buffer:
            self._serve_buffered()

    def _fail(self) -> None:
        assert self.transport is not None
        self.transport.write(BAD)
        self._close_after_write()

    def _close_after_write(self) -> None:
        assert self.transport is not None
        self.closed = True
        self.transport.close()


async def serve(port: int, burst: bool) -> None:
    FakeUpstream.burst = burst
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FakeUpstream, "127.0.0.1", port, backlog=2048)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def run(coroutine: Any) -> Any:
    """asyncio.run on uvloop when it is installed (it is: uvicorn[standard] brings it)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--writes", choices=("yield", "burst"), default="yield")
    args = parser.parse_args()
    run(serve(args.port, args.writes == "burst"))


if __name__ == "__main__":
    main()
