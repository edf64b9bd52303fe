"""The load generator for bench/perf.py: a small raw-asyncio HTTP/1.1 client, in its own process.

Run by perf.py as `python bench/perf_load.py`; it reads one JSON job per line on stdin and
answers each with one JSON line on stdout, so one process (one warm interpreter) serves the
whole run. Jobs: `latency`, `load`, `hold`, `sequential`, `sample`, `route` (see `JOBS`).

Why not httpx: at these rates the client's own cost decides what the direct target can reach,
and httpx spends some 100-200 µs of CPU per request in its request/response models; here a
request is one pre-built bytes object and one write, a response a header scan and chunk reads
on an asyncio StreamReader (uvloop when installed). That keeps the load generator's share of
the two cores small and the same for every target.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_procs import HOST, cpu_seconds, own_cpu_seconds, rss_bytes

now = time.perf_counter
DONE = b"data: [DONE]\n\n"
CONTENT = re.compile(rb'"content":\s*"(?!")')
"""A chunk's first non-empty `content` string: where the first content byte arrives."""
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} in the workspace",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name in ("read_file", "write_file", "search_code", "run_tests")
]


ROUTES: dict[int, str] = {}
"""Request headers of their own for the target on a port (the `route` job): a peer that routes
by header (Portkey's gateway: which provider, and its base URL, the fake's) gets them on every
request it is sent; other targets get none."""


def request_bytes(port: int, model: str, stream: bool) -> bytes:
    """The whole HTTP request for `model`, built once per job and target."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing test in src/module_0/main.py."},
        ],
        "stream": stream,
    }
    if "tools" in model:
        body["tools"] = TOOLS
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {HOST}:{port}\r\n"
        "content-type: application/json\r\naccept: text/event-stream, application/json\r\n"
        "authorization: Bearer sk-perf-0000\r\n"
        f"content-length: {len(payload)}\r\n{ROUTES.get(port, '')}\r\n"
    )
    return head.encode() + payload


class HTTPError(Exception):
    pass


@dataclass(slots=True)
class Result:
    status: int
    ttfb: float
    """Seconds from writing the request to the first byte of the response body."""
    ttlb: float
    """Seconds from writing the request to the end of the response body."""
    size: int
    complete: bool
    """A stream that ended with `data: [DONE]`, or any whole non-streamed body."""
    body: bytes | None = None
    ttfc: float = 0.0
    """Seconds from writing the request to the body data with the first content byte (a
    non-empty `"content":"…"`); only measured when asked, 0.0 when none came."""


@dataclass(slots=True)
class Meter:
    bytes: int = 0


class Connection:
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port, limit=1 << 20)
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None

    async def request(
        self,
        raw: bytes,
        keep: bool = False,
        first: Any = None,
        meter: Meter | None = None,
        content: bool = False,
    ) -> Result:
        """Send `raw`, read the whole response. `first`, when given, is called at the first
        body byte (the hold phase counts streams that are open); `meter` counts body bytes
        as they arrive; `content` times the first content byte of a stream (`Result.ttfc`)."""
        if self.writer is None:
            await self.open()
        reader, writer = self.reader, self.writer
        assert reader is not None and writer is not None
        started = now()
        writer.write(raw)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = -1
        chunked = close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        parts: list[bytes] = []
        size = 0
        ttfb = ttfc = 0.0
        complete = False
        if chunked:
            tail = b""
            carry = b""  # the end of the previous chunk: a match may straddle two
            while True:
                line = await reader.readuntil(b"\r\n")
                n = int(line.split(b";", 1)[0], 16)
                if n == 0:
                    await reader.readuntil(b"\r\n")  # no trailers from any target
                    break
                data = await reader.readexactly(n + 2)
                if not ttfb:
                    ttfb = now() - started
                    if first is not None:
                        first()
                size += n
                if meter is not None:
                    meter.bytes += n
                if content and not ttfc:
                    if CONTENT.search(carry + data[:-2]):
                        ttfc = now() - started
                    carry = data[-34:-2]
                tail = (tail + data[:-2])[-len(DONE) :]
                if keep:
                    parts.append(data[:-2])
            complete = tail == DONE
        elif length >= 0:
            ttfb = now() - started
            data = await reader.readexactly(length) if length else b""
            size = length
            if meter is not None:
                meter.bytes += length
            complete = True
            if keep:
                parts.append(data)
        else:
            ttfb = now() - started
            data = await reader.read()
            size, complete, close = len(data), True, True
            if keep:
                parts.append(data)
        ttlb = now() - started
        if close:
            self.close()
        body = b"".join(parts) if keep else None
        return Result(status, ttfb, ttlb, size, complete, body, ttfc)


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "n": len(ordered),
        "median": ordered[len(ordered) // 2],
        "p90": at(0.90),
        "p99": at(0.99),
        "mean": sum(ordered) / len(ordered),
        "max": ordered[-1],
    }


@dataclass
class Tally:
    requests: int = 0
    errors: int = 0
    incomplete: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, result: Result) -> None:
        if result.status != 200:
            self.errors += 1
            self._note(f"status {result.status}")
        elif not result.complete:
            self.incomplete += 1
            self._note("stream ended without [DONE]")
        else:
            self.requests += 1
            self.bytes += result.size

    def fail(self, exc: BaseException) -> None:
        self.errors += 1
        self._note(f"{type(exc).__name__}: {exc}")

    def _note(self, text: str) -> None:
        if len(self.problems) < 5:
            self.problems.append(text[:300])


# ── jobs ─────────────────────────────────────────────────────────────────────


async def latency(job: dict[str, Any]) -> dict[str, Any]:
    """Concurrency 1, the job's targets interleaved request by request (one keep-alive
    connection each), so every target sees the same moments of a noisy machine. perf.py
    leaves out of a job the targets that keep working after a response (LiteLLM): that work
    would land on the next target's request, not on the machine alike. With `content`, also
    the time to the first content byte of each stream (`ttfc`; a stream without content
    counts as infinitely late)."""
    targets: dict[str, int] = job["targets"]
    pids: dict[str, int] = job.get("pids", {})
    out: dict[str, Any] = {}
    for kind, model, stream in job["kinds"]:
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        connections = {name: Connection(port) for name, port in targets.items()}
        raws = {name: request_bytes(port, model, stream) for name, port in targets.items()}
        # ttfb, ttlb and (with `content`) the first content byte, per target
        samples: dict[str, tuple[list[float], ...]] = {n: ([], [], []) for n in targets}
        content = bool(job.get("content"))
        tallies = {name: Tally() for name in targets}
        try:
            for number in range(job["warmup"] + job["requests"]):
                for name, connection in connections.items():
                    try:
                        result = await asyncio.wait_for(
                            connection.request(raws[name], content=content), job["timeout"]
                        )
                    except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                        tallies[name].fail(exc)
                        connection.close()
                        continue
                    if number < job["warmup"]:
                        continue
                    tallies[name].add(result)
                    if result.status == 200 and result.complete:
                        samples[name][0].append(result.ttfb)
                        samples[name][1].append(result.ttlb)
                        if content:
                            samples[name][2].append(result.ttfc or float("inf"))
        finally:
            for connection in connections.values():
                connection.close()
        sent = job["warmup"] + job["requests"]
        cpu = {name: (cpu_seconds(pid) - cpu_before[name]) / sent for name, pid in pids.items()}
        out[kind] = {
            name: {
                "ttfb": quantiles(samples[name][0]),
                "ttlb": quantiles(samples[name][1]),
                **({"ttfc": quantiles(samples[name][2])} if content else {}),
                "errors": tallies[name].errors + tallies[name].incomplete,
                "problems": tallies[name].problems,
                "server_cpu_per_request": cpu.get(name),
            }
            for name in targets
        }
    return out


async def load(job: dict[str, Any]) -> dict[str, Any]:
    """`concurrency` closed-loop workers, one keep-alive connection each, on one model.

    Either a time window (`seconds`, after `warmup` seconds) or a fixed number of requests
    (`count`), both after one warm-up request per connection. Server, fake and client CPU
    are read at the window's edges.

    A window counts body bytes received in it, not requests completed: a slow target's
    streams straddle the window's edges, and counting completions would credit it with zero
    or with a whole stream. Every answer of one target to one model has the same size (the
    warm-up's median), so bytes convert to requests and to upstream events exactly."""
    port, concurrency = job["port"], job["concurrency"]
    raw = request_bytes(port, job["model"], job.get("stream", True))
    pids = job.get("pids", {})
    tally = Tally()
    meter = Meter()
    counting = False
    remaining = job.get("count") or 0
    latencies: list[float] = []
    stop = asyncio.Event()

    async def worker(connection: Connection) -> None:
        nonlocal remaining
        while not stop.is_set():
            if job.get("count"):
                if remaining <= 0:
                    return
                remaining -= 1
            try:
                result = await asyncio.wait_for(
                    connection.request(raw, meter=meter), job["timeout"]
                )
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                if counting:
                    tally.fail(exc)
                connection.close()
                await asyncio.sleep(0.01)
                continue
            if counting:
                tally.add(result)
                if len(latencies) < 200_000:
                    latencies.append(result.ttlb)

    connections = [Connection(port) for _ in range(concurrency)]
    try:
        await asyncio.gather(*(c.open() for c in connections))
        # Warm-up: every connection has been through the whole server path once.
        warm = await asyncio.gather(
            *(asyncio.wait_for(c.request(raw), job["timeout"]) for c in connections),
            return_exceptions=True,
        )
        sizes = sorted(r.size for r in warm if isinstance(r, Result) and r.status == 200)
        for connection, result in zip(connections, warm, strict=True):
            if not isinstance(result, Result) or result.status != 200:
                connection.close()  # a broken or half-read connection is opened anew
        tasks = []
        if not job.get("count"):
            tasks = [asyncio.create_task(worker(c)) for c in connections]
            await asyncio.sleep(job.get("warmup", 1.0))
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        client_before = own_cpu_seconds()
        bytes_before = meter.bytes
        if job.get("announce"):
            notify("measuring")  # perf.py starts its profiler now
        counting = True
        started = now()
        if job.get("count"):
            runs = [worker(c) for c in connections]
            await asyncio.wait_for(asyncio.gather(*runs), job["timeout"] * 4 + job["count"])
        else:
            await asyncio.sleep(job["seconds"])
        elapsed = now() - started
        received = meter.bytes - bytes_before
        counting = False
        client_cpu = own_cpu_seconds() - client_before
        stop.set()
        if job.get("count"):
            await asyncio.sleep(0.2)  # the server's bookkeeping after the last byte
        after = {name: cpu_seconds(pid) for name, pid in pids.items()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for connection in connections:
            connection.close()
    size = sizes[len(sizes) // 2] if sizes else 0
    return {
        "completed": tally.requests,
        "errors": tally.errors,
        "incomplete": tally.incomplete,
        "problems": tally.problems,
        "bytes": received,
        "response_bytes": size,
        "requests": received / size if size else 0.0,
        "seconds": elapsed,
        "cpu": {name: after[name] - before[name] for name in pids},
        "client_cpu": client_cpu,
        "ttlb": quantiles(latencies),
    }


async def hold(job: dict[str, Any]) -> dict[str, Any]:
    """Open `streams` slow streams at once; when every one has its first event, wait
    `settle` seconds and read the server's RSS; then drop them all."""
    port, count, pid = job["port"], job["streams"], job["pid"]
    raw = request_bytes(port, job["model"], True)
    idle = rss_bytes(pid)
    opened = 0
    all_open = asyncio.Event()
    results: list[Any] = []

    def first() -> None:
        nonlocal opened
        opened += 1
        if opened == count:
            all_open.set()

    async def one(connection: Connection) -> None:
        try:
            await connection.request(raw, first=first)
            results.append("ended")
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            results.append(type(exc).__name__)

    connections = [Connection(port) for _ in range(count)]
    started = now()
    tasks = [asyncio.create_task(one(c)) for c in connections]
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_open.wait(), job["timeout"])
        open_after = now() - started
        await asyncio.sleep(job["settle"])
        held = rss_bytes(pid)
        still_open = sum(not t.done() for t in tasks)
    finally:
        for connection in connections:
            connection.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "idle_rss": idle,
        "held_rss": held,
        "opened": opened,
        "open_at_measurement": still_open,
        "seconds_to_open": open_after,
        "ended_early": results.count("ended"),
    }


async def sequential(job: dict[str, Any]) -> dict[str, Any]:
    """`count` exchanges one after another on one connection, cycling through `models`
    (each `[model, stream]`), stopped early at `max_seconds`; RSS at checkpoints."""
    port, pid = job["port"], job["pid"]
    raws = [request_bytes(port, model, stream) for model, stream in job["models"]]
    connection = Connection(port)
    tally = Tally()
    checkpoints = [(0, rss_bytes(pid))]
    every = max(1, job["count"] // 4)
    started = now()
    done = 0
    try:
        while done < job["count"] and now() - started < job["max_seconds"]:
            try:
                result = await asyncio.wait_for(
                    connection.request(raws[done % len(raws)]), job["timeout"]
                )
                tally.add(result)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                tally.fail(exc)
                connection.close()
            done += 1
            if done % every == 0:
                checkpoints.append((done, rss_bytes(pid)))
    finally:
        connection.close()
    elapsed = now() - started
    await asyncio.sleep(0.3)
    if checkpoints[-1][0] != done:
        checkpoints.append((done, rss_bytes(pid)))
    return {
        "exchanges": done,
        "seconds": elapsed,
        "errors": tally.errors + tally.incomplete,
        "problems": tally.problems,
        "rss": checkpoints,
    }


async def sample(job: dict[str, Any]) -> dict[str, Any]:
    """One response body per `[model, stream]`, for correctness checks."""
    bodies = []
    for model, stream in job["models"]:
        connection = Connection(job["port"])
        try:
            result = await asyncio.wait_for(
                connection.request(request_bytes(job["port"], model, stream), keep=True),
                job["timeout"],
            )
            body = result.body or b""
            bodies.append({"status": result.status, "body": body.decode("utf-8", "replace")})
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            bodies.append({"status": 0, "body": f"{type(exc).__name__}: {exc}"})
        finally:
            connection.close()
    return {"bodies": bodies}


async def route(job: dict[str, Any]) -> dict[str, Any]:
    """From now on, requests to `port` carry `headers` (name -> value) too."""
    ROUTES[job["port"]] = "".join(f"{name}: {value}\r\n" for name, value in job["headers"].items())
    return {}


def notify(event: str) -> None:
    """A line for perf.py before the job's answer: `{"event": ...}`."""
    sys.stdout.write(json.dumps({"event": event}) + "\n")
    sys.stdout.flush()


JOBS = {
    "latency": latency,
    "load": load,
    "hold": hold,
    "sequential": sequential,
    "sample": sample,
    "route": route,
}


async def serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        job = json.loads(line)
        try:
            answer = {"ok": True, "result": await JOBS[job["job"]](job)}
        except Exception as exc:  # reported to perf.py, which decides
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def main() -> None:
    from perf_fake import run

    run(serve())


if __name__ == "__main__":
    main()
