"""The proxy's memory and liveness against hostile upstreams (issue 13, item 4).

"Bounded memory for everything the proxy buffers": an upstream that answers with far more than
any chat answer needs must cost the proxy a bounded amount of memory, and must not take it down
or freeze it for the other clients. Three upstream behaviours, one request each:

- **a** `non-stream`: a POST /v1/chat/completions without `stream` answered by a 600 MiB
  chat-completion JSON body (the message content is 600 MiB of `x`), framed with
  `Content-Length` (or chunked, `--framing chunked`).
- **b** `gzip bomb`: the same non-stream request answered by `Content-Encoding: gzip`, about
  1 MiB on the wire that inflates to 1 GiB of JSON (the content is zeros: `"0000…"`). Built once
  with `zlib.compressobj` from 1 MiB pieces and cached in memory.
- **c** `tool-call flood`: a stream request answered by `text/event-stream` (chunked) carrying
  one tool call in 502 events: the first with the call's id, type, name and `{"content": "`
  as arguments, then 500 argument fragments of 1 MiB of `x` each
  (`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":…}}]}}]}`),
  then `"}` with `finish_reason: "tool_calls"`, then `data: [DONE]`.

For each case the script starts the hostile upstream (a raw asyncio server on 127.0.0.1, in a
thread of this process), then the proxy as a subprocess:

    <python> -m proxy serve --upstream http://127.0.0.1:<up>/v1 --host 127.0.0.1 --port <p>
             --log-level warning

run with its working directory and PYTHONPATH set to `--checkout` (so an old checkout, a git
worktree, can be measured with today's script) and without any STREAMFIX_* variable of the
calling shell. It sends the one request with httpx (the body is counted as it arrives, never
kept beyond its first 64 KiB and last 4 KiB) and, while the exchange runs:

- samples the proxy's VmRSS from /proc/<pid>/status every 20 ms (a thread): the peak, against
  the RSS at idle just before the request;
- polls `GET /healthz` on the proxy every 100 ms, one poll at a time, on its own connection:
  the longest answer is how long the proxy's event loop froze (a poll that failed counts with
  the time it took, and is counted in `hz fail`).

It records the client's status code, the error code the proxy sent (the JSON body's
`error.code`, or for a stream the last event with an `error`), the bytes received, what the
upstream managed to send (how much of the hostile body the proxy actually read), and whether
the proxy is still alive afterwards (its process runs and `/healthz` answers 200). The proxy
is always ended when its case ends, in `finally`; it also gets SIGKILL if this script dies.

Bounds: each exchange has `--timeout` seconds (120), the proxy 20 s to start; a proxy whose RSS
passes `--rss-cap-mb` (8192) is killed by the script, and the row says so, so that the old
code cannot take the shared machine down. Only 127.0.0.1 is used.

    python bench/hostile_upstream.py                                  # a, b, c on this checkout
    python bench/hostile_upstream.py --checkout /tmp/before_bench     # the same on another one
    python bench/hostile_upstream.py --only a,c --size-mb 60          # a quick run
    python bench/hostile_upstream.py --framing chunked --json         # + bench/results/…json

`--size-mb N` scales all three cases by N/600: a sends N MiB, b inflates to 1024·N/600 MiB,
c sends 500·N/600 fragments. Below 64 MiB (the current `server.max_response_bytes`) case a
no longer passes the limit it is there to test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import proxy_environ, wait_ready
from processes import stop as stop_proxy

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
HOST = "127.0.0.1"
CASES = {"a": "non-stream", "b": "gzip bomb", "c": "tool-call flood"}
DEFAULT_JSON = ROOT / "bench" / "results" / "hostile_upstream.json"
KEEP_HEAD = 64 * 1024
KEEP_TAIL = 4 * 1024
RSS_PERIOD = 0.02
HEALTHZ_PERIOD = 0.1
START_SECONDS = 20


# --- the hostile bodies --------------------------------------------------------------------


def completion_parts(filler_bytes: int) -> tuple[bytes, bytes]:
    """The JSON of a chat completion around its message content: (before, after)."""
    before = (
        b'{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"bench-model",'
        b'"choices":[{"index":0,"message":{"role":"assistant","content":"'
    )
    after = (
        b'"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":'
        + str(filler_bytes).encode()
        + b',"total_tokens":1}}'
    )
    return before, after


def repeated(byte: bytes, total: int, piece: int = MiB) -> list[tuple[bytes, int]]:
    """`total` copies of `byte` as (block, times) runs of at most `piece` bytes: one block to
    reuse, so no body is ever held whole."""
    block = byte * piece
    runs = [(block, total // piece)]
    if total % piece:
        runs.append((byte * (total % piece), 1))
    return runs


def big_json_body(total_bytes: int) -> tuple[list[tuple[bytes, int]], int]:
    """Case a: a completion of exactly `total_bytes`, as runs, and its length."""
    before, after = completion_parts(0)
    filler = total_bytes - len(before) - len(after)
    before, after = completion_parts(filler)
    filler = total_bytes - len(before) - len(after)
    return [(before, 1), *repeated(b"x", filler), (after, 1)], total_bytes


@functools.cache
def gzip_bomb(inflated_bytes: int) -> bytes:
    """Case b: a gzip stream of a completion whose content is zeros, `inflated_bytes` long once
    inflated. Compressed piece by piece (1 MiB at a time), kept once per size."""
    before, after = completion_parts(0)
    filler = inflated_bytes - len(before) - len(after)
    before, after = completion_parts(filler)
    filler = inflated_bytes - len(before) - len(after)
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip wrapper
    out = [deflate.compress(before)]
    for block, times in repeated(b"0", filler):
        out.extend(deflate.compress(block) for _ in range(times))
    out += [deflate.compress(after), deflate.flush()]
    return b"".join(out)


def sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def tool_call_events(fragments: int, fragment_bytes: int = MiB) -> list[tuple[bytes, int]]:
    """Case c: the events of one tool call whose arguments come in `fragments` pieces, as runs
    of (event, times); every event is one chunk."""
    first = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_bench",
                            "type": "function",
                            "function": {"name": "write_file", "arguments": '{"content": "'},
                        }
                    ],
                },
            }
        ],
    }
    fragment = {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [{"index": 0, "function": {"arguments": "x" * fragment_bytes}}]
                },
            }
        ]
    }
    last = {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]},
                "finish_reason": "tool_calls",
            }
        ]
    }
    return [(sse(first), 1), (sse(fragment), fragments), (sse(last), 1), (sse("[DONE]"), 1)]


@dataclass
class Answer:
    """What the hostile upstream sends: a status line and headers, then the body as runs."""

    headers: list[tuple[str, str]]
    runs: list[tuple[bytes, int]]
    chunked: bool
    length: int | None = None


def answer_for(case: str, size_mb: int, framing: str) -> Answer:
    scale = size_mb / 600
    if case == "a":
        runs, length = big_json_body(size_mb * MiB)
        return Answer([("content-type", "application/json")], runs, framing == "chunked", length)
    if case == "b":
        bomb = gzip_bomb(int(1024 * MiB * scale))
        runs = [(bomb[i : i + MiB], 1) for i in range(0, len(bomb), MiB)]
        headers = [("content-type", "application/json"), ("content-encoding", "gzip")]
        return Answer(headers, runs, framing == "chunked", len(bomb))
    events = tool_call_events(max(1, round(500 * scale)))
    headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
    return Answer(headers, events, chunked=True)


# --- the hostile upstream: a raw asyncio server in a thread ---------------------------------


class HostileUpstream:
    """Answers every request on 127.0.0.1 with `answer`, then closes the connection."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sent = 0  # body bytes the proxy took (written and drained)
        self.requests = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(timeout=10)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._handle, HOST, 0)
        return self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await read_request(reader)
            self.requests += 1
            await self._send(writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            pass  # the proxy hung up: what it took is in self.sent
        except asyncio.CancelledError:
            pass  # stop(): the case is over
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def _send(self, writer: asyncio.StreamWriter) -> None:
        answer = self.answer
        head = ["HTTP/1.1 200 OK", *(f"{k}: {v}" for k, v in answer.headers)]
        if answer.chunked:
            head.append("transfer-encoding: chunked")
        else:
            head.append(f"content-length: {answer.length}")
        head.append("connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        for block, times in answer.runs:
            framed = [f"{len(block):x}\r\n".encode(), block, b"\r\n"] if answer.chunked else [block]
            for _ in range(times):
                writer.writelines(framed)
                await writer.drain()
                self.sent += len(block)
        if answer.chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 1)


async def read_request(reader: asyncio.StreamReader) -> None:
    """Read one request (head, then a Content-Length or chunked body) and drop it."""
    head = await reader.readuntil(b"\r\n\r\n")
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return
    await reader.readexactly(int(headers.get("content-length", "0")))


# --- the proxy under test ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_proxy(checkout: Path, upstream_port: int, port: int, log) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--upstream",
        f"http://{HOST}:{upstream_port}/v1",
        "--host",
        HOST,
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    return subprocess.Popen(
        command,
        cwd=checkout,  # `-m` puts the working directory first on sys.path
        env=proxy_environ(checkout),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    """VmRSS of one process every 20 ms, in a thread so a busy event loop cannot skip samples;
    kills the process past `cap` bytes."""

    def __init__(self, process: subprocess.Popen, cap: int) -> None:
        super().__init__(daemon=True)
        self.process = process
        self.cap = cap
        self.peak = 0
        self.samples = 0
        self.capped = False
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(RSS_PERIOD):
            rss = rss_bytes(self.process.pid)
            if rss is None:
                return
            self.samples += 1
            self.peak = max(self.peak, rss)
            if rss > self.cap and not self.capped:
                self.capped = True
                self.process.kill()

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)


@dataclass
class Healthz:
    longest: float = 0.0
    polls: int = 0
    failures: int = 0


async def poll_healthz(base: str, result: Healthz, stop: asyncio.Event, timeout: float) -> None:
    """GET /healthz every 100 ms, one at a time; the longest answer is the freeze."""
    async with httpx.AsyncClient(timeout=timeout) as client:
        while not stop.is_set():
            began = time.monotonic()
            try:
                ok = (await client.get(f"{base}/healthz")).status_code == 200
            except httpx.HTTPError:
                ok = False
            took = time.monotonic() - began
            result.polls += 1
            result.failures += not ok
            result.longest = max(result.longest, took)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, HEALTHZ_PERIOD - took))


# --- the client ----------------------------------------------------------------------------


@dataclass
class Received:
    status: int | None = None
    content_type: str = ""
    received: int = 0
    head: bytes = b""
    tail: bytes = b""
    failure: str = ""


async def send_request(base: str, stream: bool, timeout: float, into: Received) -> None:
    body = {
        "model": "bench-model",
        "messages": [{"role": "user", "content": "write the file"}],
        "stream": stream,
    }
    async with (
        httpx.AsyncClient(timeout=timeout) as client,
        client.stream("POST", f"{base}/v1/chat/completions", json=body) as response,
    ):
        into.status = response.status_code
        into.content_type = response.headers.get("content-type", "")
        async for _ in counted(response.aiter_raw(), into):
            pass


async def counted(pieces: AsyncIterator[bytes], into: Received) -> AsyncIterator[bytes]:
    """Count what arrives, keeping only its first and last few KiB."""
    async for piece in pieces:
        into.received += len(piece)
        if len(into.head) < KEEP_HEAD:
            into.head += piece[: KEEP_HEAD - len(into.head)]
        into.tail = (into.tail + piece)[-KEEP_TAIL:]
        yield piece


def error_code(received: Received) -> str:
    """The proxy's error code: the JSON body's, or the last stream event's with an `error`."""
    if received.content_type.startswith("text/event-stream"):
        for line in reversed(received.tail.split(b"\n")):
            if line.startswith(b"data:") and b'"error"' in line:
                return _code(line[5:])
        return ""
    if received.received <= KEEP_HEAD:
        return _code(received.head)
    return ""


def _code(data: bytes) -> str:
    try:
        error = json.loads(data).get("error")
    except (ValueError, AttributeError):
        return ""
    if not isinstance(error, dict):
        return ""
    return str(error.get("code") or error.get("type") or "")


# --- one case ------------------------------------------------------------------------------


@dataclass
class Row:
    case: str
    name: str
    status: int | None = None
    error_code: str = ""
    received_bytes: int = 0
    upstream_sent_bytes: int = 0
    idle_rss_mib: float = 0.0
    peak_rss_mib: float = 0.0
    max_healthz_ms: float = 0.0
    healthz_polls: int = 0
    healthz_failures: int = 0
    alive: bool = False
    killed_at_rss_cap: bool = False
    exit_code: int | None = None
    seconds: float = 0.0
    failure: str = ""
    proxy_log_tail: list[str] = field(default_factory=list)


async def run_case(case: str, args: argparse.Namespace) -> Row:
    row = Row(case, CASES[case])
    upstream = HostileUpstream(answer_for(case, args.size_mb, args.framing))
    upstream.start()
    port = free_port()
    base = f"http://{HOST}:{port}"
    with tempfile.TemporaryFile() as log:
        process = start_proxy(args.checkout, upstream.port, port, log)
        try:
            await exchange(case, args, process, base, row)
            row.upstream_sent_bytes = upstream.sent
        except RuntimeError as exc:
            row.failure = str(exc)
        finally:
            stop_proxy(process)
            upstream.stop()
            log.seek(0)
            row.proxy_log_tail = log.read().decode(errors="replace").splitlines()[-8:]
    return row


async def exchange(
    case: str, args: argparse.Namespace, process: subprocess.Popen, base: str, row: Row
) -> None:
    async with httpx.AsyncClient() as client:
        await wait_ready(client, f"{base}/healthz", process, START_SECONDS)
    await asyncio.sleep(0.5)  # let the fresh process settle before taking its idle RSS
    row.idle_rss_mib = (rss_bytes(process.pid) or 0) / MiB
    sampler = RssSampler(process, args.rss_cap_mb * MiB)
    healthz, stop = Healthz(), asyncio.Event()
    received = Received()
    sampler.start()
    poller = asyncio.create_task(poll_healthz(base, healthz, stop, args.timeout))
    began = time.monotonic()
    try:
        await asyncio.wait_for(
            send_request(base, case == "c", args.timeout, received), args.timeout
        )
    except (httpx.HTTPError, TimeoutError) as exc:
        received.failure = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    finally:
        row.seconds = time.monotonic() - began
        await asyncio.sleep(0.3)  # what the proxy does just after the exchange counts too
        stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(poller, 10)
        sampler.stop()
    row.status, row.received_bytes = received.status, received.received
    row.error_code = error_code(received)
    row.failure = received.failure
    row.peak_rss_mib = max(sampler.peak, rss_bytes(process.pid) or 0) / MiB
    row.max_healthz_ms = healthz.longest * 1000
    row.healthz_polls, row.healthz_failures = healthz.polls, healthz.failures
    row.killed_at_rss_cap = sampler.capped
    row.alive = await still_alive(process, base)
    row.exit_code = process.poll()


async def still_alive(process: subprocess.Popen, base: str) -> bool:
    if process.poll() is not None:
        return False
    async with httpx.AsyncClient(timeout=10) as client:
        try:
            return (await client.get(f"{base}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False


# --- reporting -----------------------------------------------------------------------------


def describe_checkout(checkout: Path) -> dict[str, str]:
    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(checkout), *argv], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    imported = subprocess.run(
        [sys.executable, "-c", "import proxy; print(proxy.__file__)"],
        cwd=checkout,
        env=proxy_environ(checkout),
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "checkout": str(checkout),
        "commit": git("rev-parse", "--short", "HEAD"),
        "proxy_dirty": "yes" if git("status", "--porcelain", "--", "proxy") else "no",
        "proxy_module": imported.stdout.strip() or imported.stderr.strip()[-200:],
    }


def size(count: int) -> str:
    if count >= MiB:
        return f"{count / MiB:.1f} MiB"
    return f"{count / 1024:.1f} KiB" if count >= 1024 else f"{count} B"


def print_table(rows: list[Row]) -> None:
    columns = (
        "case",
        "status",
        "error code",
        "received",
        "upstream sent",
        "idle RSS",
        "peak RSS",
        "max /healthz",
        "hz fail",
        "alive",
        "time",
    )
    lines = [columns]
    for row in rows:
        result = row.error_code or ("-" if row.status is None else "")
        alive = "yes" if row.alive else "no" + (" (RSS cap)" if row.killed_at_rss_cap else "")
        lines.append(
            (
                f"{row.case} {row.name}",
                "-" if row.status is None else str(row.status),
                result,
                size(row.received_bytes),
                size(row.upstream_sent_bytes),
                f"{row.idle_rss_mib:.0f} MiB",
                f"{row.peak_rss_mib:.0f} MiB",
                f"{row.max_healthz_ms:.0f} ms",
                f"{row.healthz_failures}/{row.healthz_polls}",
                alive,
                f"{row.seconds:.1f} s",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    for index, line in enumerate(lines):
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))
    for row in rows:
        if row.failure:
            print(f"{row.case}: client: {row.failure}")
        if not row.alive or row.status is None:
            print(f"{row.case}: proxy exit code {row.exit_code}; its last log lines:")
            for line in row.proxy_log_tail:
                print(f"    {line}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--checkout", type=Path, default=ROOT, help="checkout to run the proxy from"
    )
    parser.add_argument("--only", default="a,b,c", help="cases to run, comma-separated (a,b,c)")
    parser.add_argument("--size-mb", type=int, default=600, help="scale: case a's body in MiB")
    parser.add_argument(
        "--framing",
        choices=("length", "chunked"),
        default="length",
        help="how cases a and b frame their body (c is always chunked)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per exchange")
    parser.add_argument("--rss-cap-mb", type=int, default=8192, help="kill the proxy past this")
    parser.add_argument(
        "--json",
        nargs="?",
        type=Path,
        const=DEFAULT_JSON,
        default=None,
        help=f"also write the rows as JSON (default path {DEFAULT_JSON})",
    )
    args = parser.parse_args(argv)
    args.checkout = args.checkout.resolve()
    args.cases = [case.strip() for case in args.only.split(",") if case.strip()]
    unknown = [case for case in args.cases if case not in CASES]
    if unknown:
        parser.error(f"--only: unknown case(s) {', '.join(unknown)}; known: a, b, c")
    if not 1 <= args.size_mb <= 600:
        parser.error("--size-mb: between 1 and 600 (this machine's memory is shared)")
    return args


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    described = describe_checkout(args.checkout)
    for key, value in described.items():
        print(f"{key}: {value}")
    print(f"size: {args.size_mb} MiB scale, framing {args.framing}, timeout {args.timeout:.0f} s\n")
    rows = []
    for case in args.cases:
        rows.append(await run_case(case, args))
        print(f"  {case} done in {rows[-1].seconds:.1f} s", flush=True)
    print()
    print_table(rows)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        document = {
            **described,
            "size_mb": args.size_mb,
            "framing": args.framing,
            "rows": [asdict(row) for row in rows],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
