"""Soak: many concurrent repaired streams through a real proxy process, some cut off mid-way.

Three processes, all on 127.0.0.1:

- a fake upstream (this file, `--serve-fake PORT`, under uvicorn): Gemini-style streams, either
  three indexless parallel tool calls with arguments spread over deltas, a thought signature on
  the first call and `finish_reason: "stop"`, or plain text with `role` on every delta. Every
  variable field (chunk id, call ids, the signature, the first words of the text) carries the
  request's sequence number, which the client sends in `user` and in the message text; each
  stream lasts 0.5-2 s (a pure function of the sequence number) and every third one has its
  events cut in two mid-JSON. `GET /stats` reports the streams it has open.
- the proxy: `python -m proxy serve --config <tmp> --upstream http://127.0.0.1:PORT/v1 --port P
  --log-level warning`, with `signatures.max_entries` small (1,000) so the store's bound is
  reached early in the run.
- the load generator (this process, asyncio + httpx): `--concurrency` workers, each sending one
  streamed request after another until `--seconds` have passed. A `--disconnect-fraction` of
  the streams are abandoned at a random moment before their end.

Before the load, one request per kind is checked with `proxy.repair.conformance.violations` and its
calls or text compared with what the fake sent; that answer is the reference. A later answer
must equal the reference with the sequence number swapped in (a pure byte substitution: the
number is fixed-width), byte for byte; an abandoned stream must have received a prefix of it.
After the load: the fake's open streams and the proxy's `streamfix_active_streams` must be 0,
and non-streamed probes check that the newest receipts are still injected and the oldest were
evicted at the bound. Exit status 0 only when every check passed.

    python bench/soak.py [--concurrency 300] [--seconds 60] [--disconnect-fraction 0.2]
                         [--emit atomic|incremental] [--max-entries 1000] [--seed 1]
                         [--timeline] [--log-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import itertools
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from processes import proxy_environ, stop, wait_ready

from proxy.repair.conformance import stream_chunks, violations

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
HOST = "127.0.0.1"
AUTH = {"authorization": "Bearer soak-test-key"}
PLACEHOLDER = "skip_thought_signature_validator"

# ── what the fake sends: pure functions of the sequence number ──────────────


def token(seq: int) -> str:
    """The fixed-width marker every per-request field carries."""
    return f"sq{seq:010d}"


def kind_of(seq: int) -> str:
    return "tools" if seq % 2 == 0 else "text"


def duration_of(seq: int) -> float:
    """How long the fake takes to send stream `seq`: 0.5-2 s."""
    return 0.5 + 1.5 * random.Random(seq).random()


def split_mid_json(seq: int) -> bool:
    return seq % 3 == 0


SIGNATURE_TAIL = "Q0wVb6kU9yR3nX8mZ1aD4eF7gJ0hK2lP5oS8qT1uW4vY7zA0cB3dE6fG9hI2jK5lM8nO1pQ4rS7t" * 2


def signature_of(seq: int) -> str:
    return f"CnsB{token(seq)}{SIGNATURE_TAIL}"


def call_id(seq: int, n: int) -> str:
    return f"function-call-{token(seq)}-{n}"


CALLS = (  # name, argument fragments as the upstream spreads them
    ("get_weather", ('{"city":', '"Par', 'is"}')),
    ("get_weather", ('{"city":', '"Tok', 'yo"}')),
    ("read_file", ('{"path":', '"/src/', 'main.go"}')),
)
TEXT_PARTS = (
    "The ",
    "quick ",
    "brown ",
    "fox — ",
    "naïve ",
    "café ",
    "東京 ",
    "jumps ",
    "over ",
    "the ",
    "lazy ",
    "dog.\n",
    "Done ",
    "now.",
)
USAGE = {"completion_tokens": 30, "prompt_tokens": 402, "total_tokens": 432}


def expected_calls(seq: int) -> list[dict[str, Any]]:
    calls = []
    for n, (name, fragments) in enumerate(CALLS):
        calls.append(
            {
                "id": call_id(seq, n),
                "name": name,
                "arguments": orjson.loads("".join(fragments)),
                "signature": signature_of(seq) if n == 0 else None,
            }
        )
    return calls


def expected_text(seq: int) -> str:
    return f"Answer {token(seq)}: " + "".join(TEXT_PARTS)


def upstream_events(seq: int) -> list[bytes]:
    """The SSE events of stream `seq`, as Gemini's OpenAI-compatible endpoint shapes them."""
    envelope = {
        "created": 1774894020,
        "id": f"chatcmpl-{token(seq)}",
        "model": "gemini-3-flash-preview",
        "object": "chat.completion.chunk",
    }

    def event(delta: dict[str, Any], finish: str | None = None, usage: bool = False) -> bytes:
        choice: dict[str, Any] = {"delta": delta, "index": 0}
        if finish:
            choice["finish_reason"] = finish
        chunk: dict[str, Any] = {"choices": [choice], **envelope}
        if usage:
            chunk["usage"] = USAGE
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    events = []
    if kind_of(seq) == "tools":
        opening = []
        for n, (name, fragments) in enumerate(CALLS):
            entry: dict[str, Any] = {}
            if n == 0:  # Gemini signs only the first of parallel calls
                entry["extra_content"] = {"google": {"thought_signature": signature_of(seq)}}
            entry["function"] = {"arguments": fragments[0], "name": name}
            entry |= {"id": call_id(seq, n), "type": "function"}
            opening.append(entry)
        events.append(event({"role": "assistant", "tool_calls": opening}))
        for part in (1, 2):  # indexless entries that continue the open calls by position
            entries = [{"function": {"arguments": frags[part]}} for _, frags in CALLS]
            events.append(event({"role": "assistant", "tool_calls": entries}, usage=part == 2))
        events.append(event({"role": "assistant"}, finish="stop", usage=True))
    else:
        parts = [f"Answer {token(seq)}: ", *TEXT_PARTS]
        for part in parts:
            events.append(event({"content": part, "role": "assistant"}))
        events.append(event({"role": "assistant"}, finish="stop", usage=True))
    events.append(b"data: [DONE]\n\n")
    return events


def upstream_pieces(seq: int) -> list[bytes]:
    """The writes of stream `seq`: its events, or each JSON event cut in two mid-object."""
    pieces = []
    for event in upstream_events(seq):
        start, end = event.find(b"{"), event.rfind(b"}")
        if split_mid_json(seq) and end - start > 2:
            cut = (start + end) // 2
            pieces += [event[:cut], event[cut:]]
        else:
            pieces.append(event)
    return pieces


def request_body(seq: int) -> dict[str, Any]:
    model = "gemini-soak-tools" if kind_of(seq) == "tools" else "gemini-soak-text"
    return {
        "model": model,
        "stream": True,
        "user": f"soak-{seq}",
        "messages": [{"role": "user", "content": f"soak request {seq}"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
            for name in ("get_weather", "read_file")
        ],
    }


# ── the fake upstream process ────────────────────────────────────────────────


def fake_app() -> Any:
    """A minimal Starlette app: streams, a non-streamed probe answer, and /stats."""
    import anyio
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    stats = Counter()
    ends: dict[int, tuple[float, str]] = {}  # seq -> (time.monotonic(), how the stream ended)
    headers = [(b"content-type", b"text/event-stream; charset=utf-8")]

    class Stream:
        def __init__(self, seq: int) -> None:
            self.seq = seq

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            stats["open_streams"] += 1
            stats["started"] += 1
            finished = False
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._watch, receive, group.cancel_scope)
                    await self._send_all(send)
                    finished = True
                    group.cancel_scope.cancel()
            finally:
                stats["open_streams"] -= 1
                outcome = "finished" if finished else "cancelled"
                stats[outcome] += 1
                ends[self.seq] = (time.monotonic(), outcome)

        async def _send_all(self, send: Any) -> None:
            pieces = upstream_pieces(self.seq)
            pause = duration_of(self.seq) / len(pieces)
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for piece in pieces:
                await anyio.sleep(pause)
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                stats["writes"] += 1
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        @staticmethod
        async def _watch(receive: Any, scope: anyio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            scope.cancel()

    async def chat(request: Request) -> Any:
        body = orjson.loads(await request.body())
        if body.get("model") == "gemini-soak-probe":
            # Report the signature that arrived on each assistant call.
            seen = [
                (call.get("extra_content") or {}).get("google", {}).get("thought_signature")
                for message in body["messages"]
                if message.get("role") == "assistant"
                for call in message.get("tool_calls") or ()
            ]
            answer = {
                "id": "chatcmpl-probe",
                "object": "chat.completion",
                "created": 1774894020,
                "model": "gemini-3-flash-preview",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": orjson.dumps(seen).decode()},
                    }
                ],
            }
            return Response(orjson.dumps(answer), media_type="application/json")
        seq = int(body["user"].removeprefix("soak-"))
        if f"soak request {seq}" != body["messages"][-1]["content"]:
            return JSONResponse({"error": {"message": "user and message disagree"}}, 400)
        return Stream(seq)

    async def stats_endpoint(request: Request) -> Response:
        if "ends" in request.query_params:
            return Response(orjson.dumps(ends, option=orjson.OPT_NON_STR_KEYS))
        return JSONResponse(dict(stats))

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/stats", stats_endpoint, methods=["GET"]),
        ]
    )


def serve_fake(port: int) -> None:
    import uvicorn

    # uvicorn's default keep-alive (5 s), as a local vLLM or any uvicorn upstream has it.
    uvicorn.run(
        fake_app(),
        host=HOST,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=5,
    )


# ── processes ────────────────────────────────────────────────────────────────


def source_revision() -> str:
    """Which proxy is measured: the checkout's commit, and whether proxy/ differs from it."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "proxy"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"{ROOT} (not a git checkout)"
    return f"{ROOT} at {rev}" + (" with uncommitted changes in proxy/" if changed else "")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """Children get SIGKILL when this process dies, even by a signal no `finally` sees."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start(command: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=proxy_environ(),  # only the config file and flags configure the proxy
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (bytes), threads, open fds and CPU seconds of one process."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "VmRSS":
            fields["rss"] = int(value.split()[0]) * 1024
        elif name == "Threads":
            fields["threads"] = int(value)
    fields["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    stat = Path(f"/proc/{pid}/stat").read_text()
    ticks = stat[stat.rindex(")") + 2 :].split()
    fields["cpu_ticks"] = int(ticks[11]) + int(ticks[12])  # utime + stime
    return fields


def host_cpu() -> dict[str, float]:
    """Seconds the whole machine spent busy, idle and stolen (all CPUs, from /proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    return {
        "busy": (user + nice + system + irq + softirq) / hz,
        "idle": (idle + iowait) / hz,
        "steal": steal / hz,
    }


TCP_COUNTERS = ("ListenOverflows", "ListenDrops", "TCPSynRetrans", "TCPTimeouts")


def tcp_counters() -> dict[str, int]:
    """This network namespace's TcpExt counters that show a listener not keeping up."""
    lines = [line.split() for line in Path("/proc/net/netstat").read_text().splitlines()]
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if names[0] == "TcpExt:":
            table = dict(zip(names[1:], values[1:], strict=True))
            return {name: int(table.get(name, 0)) for name in TCP_COUNTERS}
    return {}


def metric(text: str, name: str, labels: str = "") -> float:
    """One sample's value from a Prometheus exposition (0 when absent)."""
    pattern = re.escape(name) + (re.escape("{" + labels + "}") if labels else r"(?:\{\})?")
    match = re.search(rf"^{pattern} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


# ── checking answers ─────────────────────────────────────────────────────────


def parsed_answer(body: bytes) -> tuple[list[dict[str, Any]], str, list[str]]:
    """Calls (assembled by index), text and finish reasons of a repaired stream."""
    calls: dict[int, dict[str, Any]] = {}
    text: list[str] = []
    finishes: list[str] = []
    for chunk in stream_chunks(body):
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for entry in delta.get("tool_calls") or ():
                call = calls.setdefault(entry["index"], {"arguments": "", "signature": None})
                call.setdefault("id", entry.get("id"))
                function = entry.get("function") or {}
                call.setdefault("name", function.get("name"))
                call["arguments"] += function.get("arguments") or ""
                signature = (entry.get("extra_content") or {}).get("google", {})
                call["signature"] = signature.get("thought_signature") or call["signature"]
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    assembled = [
        {**call, "arguments": orjson.loads(call["arguments"] or "null")}
        for _, call in sorted(calls.items())
    ]
    return assembled, "".join(text), finishes


def check_reference(seq: int, body: bytes, emit: str) -> list[str]:
    problems = [f"violation: {p}" for p in violations(body, emit)]
    calls, text, finishes = parsed_answer(body)
    if kind_of(seq) == "tools":
        if calls != expected_calls(seq):
            problems.append(f"calls {calls} != {expected_calls(seq)}")
        if finishes != ["tool_calls"] or text:
            problems.append(f"finish {finishes}, text {text!r}")
    elif text != expected_text(seq) or finishes != ["stop"] or calls:
        problems.append(f"text {text!r}, finish {finishes}, calls {calls}")
    return problems


@dataclass
class Reference:
    seq: int
    body: bytes
    emit: str

    def expected(self, seq: int) -> bytes:
        return self.body.replace(token(self.seq).encode(), token(seq).encode())


# ── the load ─────────────────────────────────────────────────────────────────


@dataclass
class Tally:
    started: int = 0
    completed: int = 0
    disconnected: int = 0
    errors: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    events: int = 0
    received_bytes: int = 0
    completed_tools: deque = field(default_factory=deque)  # seqs, in completion order
    cuts: dict[int, float] = field(default_factory=dict)  # seq -> when the client left
    per_second: Counter = field(default_factory=Counter)

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if len(self.examples) < 5:
            self.examples.append(f"{kind}: {detail}"[:600])


async def read_until(response: httpx.Response, deadline: float, received: bytearray) -> bool:
    """Read the body into `received` until it ends (False) or `deadline` passes (True).

    Each read runs in its own task under `asyncio.wait_for`, so the cancellation that cuts
    the stream hits that read only, and the response is then closed by the caller's task.
    """
    parts = response.aiter_raw()
    while True:
        try:
            part = await asyncio.wait_for(anext(parts), max(0.0, deadline - time.monotonic()))
        except StopAsyncIteration:
            return False
        except TimeoutError:
            return True
        received += part


async def one_stream(
    client: httpx.AsyncClient,
    url: str,
    seq: int,
    reference: Reference,
    cut_after: float | None,
    tally: Tally,
    started: float,
) -> None:
    expected = reference.expected(seq)
    received = bytearray()
    tally.started += 1
    try:
        async with client.stream("POST", url, json=request_body(seq), headers=AUTH) as response:
            if response.status_code != 200:
                await response.aread()
                tally.error(f"status {response.status_code}", response.text[:300])
                return
            if cut_after is None:
                async for part in response.aiter_raw():
                    received += part
            elif await read_until(response, time.monotonic() + cut_after, received):
                tally.cuts[seq] = time.monotonic()  # leaving the block closes the connection
                tally.disconnected += 1
                if not expected.startswith(received):
                    tally.error("prefix mismatch", f"seq {seq}: {bytes(received)[-200:]!r}")
                return
    except Exception as exc:  # every failure counts, none stops the soak
        detail = f"seq {seq}: {exc!r}"
        if isinstance(exc, httpx.PoolTimeout):  # the worker's own one-connection pool
            detail += f"; pool {getattr(client._transport, '_pool', None)!r}"
        tally.error(type(exc).__name__, detail)
        return
    finally:
        tally.events += received.count(b"data:")
        tally.received_bytes += len(received)
        tally.per_second[int(time.monotonic() - started)] += 1
    if bytes(received) != expected:
        got = bytes(received)
        pairs = enumerate(zip(got, expected, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(got), len(expected)))
        low = max(0, at - 60)
        tally.error(
            "byte mismatch",
            f"seq {seq}: {len(got)} B, expected {len(expected)} B, first difference at byte "
            f"{at}: got {got[low : at + 60]!r}, expected {expected[low : at + 60]!r}; "
            f"violations {violations(got, reference.emit)[:3]}",
        )
        return
    tally.completed += 1
    if kind_of(seq) == "tools":
        tally.completed_tools.append(seq)


async def load(
    clients: list[httpx.AsyncClient],
    url: str,
    references: dict[str, Reference],
    args: argparse.Namespace,
    tally: Tally,
    first_seq: int,
) -> float:
    """Run the workers until `args.seconds` have passed; return when the last stream ended."""
    rng = random.Random(args.seed)
    counter = iter(range(first_seq, 1 << 40))
    started = time.monotonic()
    deadline = started + args.seconds

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            seq = next(counter)
            cut_after = None
            if rng.random() < args.disconnect_fraction:
                cut_after = duration_of(seq) * rng.uniform(0.1, 0.9)
            await one_stream(client, url, seq, references[kind_of(seq)], cut_after, tally, started)

    await asyncio.gather(*(worker(client) for client in clients))
    return time.monotonic() - started


@dataclass
class Sampler:
    """Once a second: the proxy's RSS, fds and metrics, and every process's CPU time."""

    pids: dict[str, int]
    metrics_url: str
    stats_url: str
    client: httpx.AsyncClient
    samples: list[dict[str, Any]] = field(default_factory=list)

    async def take(self, started: float) -> dict[str, Any]:
        sample: dict[str, Any] = {"t": time.monotonic() - started}
        for name, pid in self.pids.items():
            status = proc_status(pid)
            sample[f"{name}_cpu"] = status["cpu_ticks"] / os.sysconf("SC_CLK_TCK")
            if name == "proxy":
                sample.update(rss=status["rss"], fds=status["fds"], threads=status["threads"])
        sample["netstat"] = tcp_counters()
        sample["host"] = host_cpu()
        try:
            asked = time.monotonic()
            text = (await self.client.get(self.metrics_url, timeout=5)).text
            sample["metrics_latency"] = time.monotonic() - asked
            sample["active"] = metric(text, "streamfix_active_streams")
            sample["captured"] = metric(text, "streamfix_signatures_total", 'event="captured"')
            sample["fake_open"] = (await self.client.get(self.stats_url)).json()["open_streams"]
        except httpx.HTTPError:
            sample["active"] = sample["captured"] = sample["fake_open"] = None
            sample["metrics_latency"] = None
        self.samples.append(sample)
        return sample

    async def run(self, started: float) -> None:
        while True:
            await self.take(started)
            await asyncio.sleep(1 - (time.monotonic() - started) % 1)


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 60 if var else 0.0


def percentiles(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    median, p99 = (values[min(len(values) - 1, int(q * len(values)))] * 1000 for q in (0.5, 0.99))
    return f"median {median:.0f} ms, p99 {p99:.0f} ms, max {values[-1] * 1000:.0f} ms"


def abandoned_upstreams(cuts: dict[int, float], ends: dict[int, list]) -> str:
    """What the fake saw of each stream a client abandoned, timed from the client leaving
    (time.monotonic() is one clock for every process on the machine)."""
    closed, ran_on, before = [], [], 0
    for seq, cut in cuts.items():
        ended, outcome = ends.get(seq, (None, None))
        if ended is None:
            continue
        if outcome == "cancelled":
            closed.append(ended - cut)
        elif ended > cut:
            ran_on.append(ended - cut)
        else:
            before += 1
    slow = sum(delay > 1 for delay in closed + ran_on)
    return (
        f"abandoned streams, upstream side: {len(closed):,} closed by the proxy after the client "
        f"left ({percentiles(closed)}); {len(ran_on):,} ran to their end first "
        f"({percentiles(ran_on)}); {before:,} had already ended; {slow} open for more than 1 s "
        f"after the client left; {len(cuts) - len(closed) - len(ran_on) - before} unaccounted"
    )


def print_timeline(samples: list[dict[str, Any]], tally: Tally, pids: dict[str, int]) -> None:
    print("   t  ended  active  fake_open  RSS_MiB  fds  " + "  ".join(f"{n}_cpu%" for n in pids))
    for before, sample in itertools.pairwise(samples):
        span = sample["t"] - before["t"]
        cpu = [(sample[f"{n}_cpu"] - before[f"{n}_cpu"]) / span * 100 for n in pids]
        second = int(before["t"])
        print(
            f"{sample['t']:>4.0f}  {tally.per_second[second]:>5}  {sample['active'] or 0:>6.0f}  "
            f"{sample['fake_open'] or 0:>9}  {sample['rss'] / MiB:>7.1f}  {sample['fds']:>3}  "
            + "  ".join(f"{value:>{len(n) + 5}.0f}" for n, value in zip(pids, cpu, strict=True))
        )


async def probe(client: httpx.AsyncClient, url: str, seq: int) -> str | None:
    """Ask with stream `seq`'s first call in the history; return the signature the fake saw."""
    arguments = orjson.dumps(expected_calls(seq)[0]["arguments"]).decode()
    call = {
        "id": call_id(seq, 0),
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }
    body = {
        "model": "gemini-soak-probe",
        "messages": [
            {"role": "user", "content": f"soak request {seq}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ],
    }
    response = await client.post(url, json=body, headers=AUTH, timeout=10)
    response.raise_for_status()
    seen = orjson.loads(response.json()["choices"][0]["message"]["content"])
    return seen[0] if seen else None


# ── main ─────────────────────────────────────────────────────────────────────


async def soak(args: argparse.Namespace, workdir: Path) -> int:
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGALRM, main_task.cancel)
    fake_port, proxy_port = free_port(), free_port()
    config = workdir / "streamfix.toml"
    config.write_text(
        f'[signatures]\nmax_entries = {args.max_entries}\n[tool_calls]\nemit = "{args.emit}"\n'
    )
    fake = proxy = None
    proxy_log = workdir / "proxy.log"
    control = httpx.AsyncClient(timeout=httpx.Timeout(10))
    # One client (one connection) per worker: httpcore 1.0's pool does O(connections²) work
    # per request and per response close, which at 300 connections in one pool costs more CPU
    # than the proxy itself.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    timeout = httpx.Timeout(10, read=30)
    clients = [httpx.AsyncClient(limits=limits, timeout=timeout) for _ in range(args.concurrency)]
    try:
        fake = start(
            [sys.executable, __file__, "--serve-fake", str(fake_port)], workdir / "fake.log"
        )
        proxy_command = [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--config",
            str(config),
            "--upstream",
            f"http://{HOST}:{fake_port}/v1",
            "--host",
            HOST,
            "--port",
            str(proxy_port),
            "--log-level",
            "warning",
        ]
        proxy = start(proxy_command, proxy_log)
        base = f"http://{HOST}:{proxy_port}"
        stats_url = f"http://{HOST}:{fake_port}/stats"
        await wait_ready(control, stats_url, fake)
        await wait_ready(control, f"{base}/readyz", proxy)
        print(f"proxy: python {' '.join(proxy_command[1:])}")
        print(f"proxy source: {source_revision()}")
        print(
            f"soak: {args.concurrency} concurrent streams for {args.seconds:g} s, "
            f"{args.disconnect_fraction:.0%} disconnect at random, emit={args.emit}, "
            f"signatures.max_entries={args.max_entries:,}, seed {args.seed}"
        )

        url = f"{base}/v1/chat/completions"
        references: dict[str, Reference] = {}
        for seq in (0, 1):  # seq 0 is a tool stream, 1 a text stream
            response = await control.post(url, json=request_body(seq), headers=AUTH, timeout=30)
            problems = check_reference(seq, response.content, args.emit)
            if response.status_code != 200 or problems:
                print(f"reference {kind_of(seq)}: status {response.status_code}: {problems}")
                print(response.content.decode(errors="replace"))
                return 1
            references[kind_of(seq)] = Reference(seq, response.content, args.emit)
        for kind, ref in references.items():
            print(
                f"reference {kind:<5}: {len(ref.body):,} B, {ref.body.count(b'data:')} events, "
                "0 violations, calls/text as sent"
            )

        pids = {"proxy": proxy.pid, "fake": fake.pid, "loadgen": os.getpid()}
        sampler = Sampler(pids, f"{base}/metrics", stats_url, control)
        tally = Tally()
        started = time.monotonic()
        baseline = await sampler.take(started)
        sampling = asyncio.create_task(sampler.run(started))
        try:
            async with asyncio.timeout(args.seconds + 90):  # streams last 2 s at most
                elapsed = await load(clients, url, references, args, tally, first_seq=2)
        except TimeoutError:
            tally.error("hard limit", f"load did not end within {args.seconds + 90:g} s")
            elapsed = time.monotonic() - started
        finally:
            sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampling
        end_of_load = await sampler.take(started)
        load_samples = [s for s in sampler.samples if s["t"] <= elapsed + 0.5]

        # Afterwards: nothing left open, upstream or in the proxy.
        drain_started = time.monotonic()
        while True:
            fake_stats = (await control.get(stats_url)).json()
            text = (await control.get(f"{base}/metrics")).text
            active = metric(text, "streamfix_active_streams")
            if (fake_stats.get("open_streams", 0) == 0 and active == 0) or (
                time.monotonic() - drain_started > 10
            ):
                break
            await asyncio.sleep(0.1)
        drained_after = time.monotonic() - drain_started
        ends = {int(k): v for k, v in (await control.get(stats_url + "?ends")).json().items()}
        captured = int(metric(text, "streamfix_signatures_total", 'event="captured"'))

        # The store's bound: the newest receipts are injected, the oldest evicted.
        tools = list(tally.completed_tools)
        count = min(50, len(tools) // 2)
        newest = [await probe(control, url, seq) == signature_of(seq) for seq in tools[-count:]]
        oldest_seen = [(await probe(control, url, seq), signature_of(seq)) for seq in tools[:count]]
        oldest_held = sum(seen == signature for seen, signature in oldest_seen)
        oldest_evicted = sum(seen == PLACEHOLDER for seen, _ in oldest_seen)
        after = await sampler.take(started)
        for client in clients:  # the proxy's client-side sockets should now close
            await client.aclose()
        await asyncio.sleep(2)
        closed = proc_status(proxy.pid)

        # ── figures ──
        rss = [s["rss"] for s in load_samples]
        window = min(30.0, elapsed / 2)
        tail = [(s["t"], s["rss"] / MiB) for s in load_samples if s["t"] >= elapsed - window]
        fd_tail = [(s["t"], s["fds"]) for s in load_samples if s["t"] >= elapsed - window]
        total = tally.completed + tally.disconnected + sum(tally.errors.values())
        print(
            f"load: {elapsed:.1f} s (workers stop starting streams at {args.seconds:g} s, "
            f"then finish the ones open)"
        )
        print(f"  streams started            {tally.started:>9,}")
        print(f"  completed, byte-exact      {tally.completed:>9,}")
        print(
            f"  disconnected on purpose    {tally.disconnected:>9,}  (each a prefix of its answer)"
        )
        print(
            f"  errors                     {sum(tally.errors.values()):>9,}  {dict(tally.errors)}"
        )
        for example in tally.examples:
            print(f"    {example}")
        rate_rows = [tally.per_second[t] for t in range(1, int(args.seconds))] or [0]
        print(
            f"  rate: {total / elapsed:,.1f} streams/s ended (per-second min {min(rate_rows)}"
            f", max {max(rate_rows)}), {tally.events / elapsed:,.0f} chunks/s to clients "
            f"({tally.received_bytes / elapsed / MiB:.2f} MiB/s), "
            f"{fake_stats.get('writes', 0) / elapsed:,.0f} upstream writes/s"
        )
        print(
            f"proxy RSS: start {baseline['rss'] / MiB:.1f} MiB, peak {max(rss) / MiB:.1f} MiB, "
            f"end {end_of_load['rss'] / MiB:.1f} MiB (after probes {after['rss'] / MiB:.1f}); "
            f"slope over the last {window:.0f} s of load {slope_per_minute(tail):+.2f} MiB/min"
        )
        print(
            f"proxy fds: start {baseline['fds']}, peak {max(s['fds'] for s in load_samples)}, "
            f"end {after['fds']}, {closed['fds']} once the load generator closed its keep-alive "
            f"connections; slope over the last {window:.0f} s "
            f"{slope_per_minute(fd_tail):+.1f}/min; threads {after['threads']}"
        )
        active_peak = max((s["active"] or 0) for s in load_samples)
        latencies = [s["metrics_latency"] for s in load_samples if s["metrics_latency"]]
        print(
            f"proxy active_streams: peak {active_peak:.0f} during load; /metrics answered in "
            f"{max(latencies, default=0) * 1000:.0f} ms at worst"
        )
        net = {
            name: end_of_load["netstat"].get(name, 0) - baseline["netstat"].get(name, 0)
            for name in TCP_COUNTERS
        }
        print("TCP during load (whole host): " + ", ".join(f"{k} {v}" for k, v in net.items()))
        spans = end_of_load["t"] - baseline["t"]
        cpu = {
            name: (end_of_load[f"{name}_cpu"] - baseline[f"{name}_cpu"]) / spans * 100
            for name in pids
        }
        host = {
            k: (end_of_load["host"][k] - baseline["host"][k]) / spans * 100
            for k in ("busy", "idle", "steal")
        }
        print(
            "CPU during load (% of one core): "
            + ", ".join(f"{name} {value:.0f}%" for name, value in cpu.items())
            + f"; whole machine busy {host['busy']:.0f}%, idle {host['idle']:.0f}%, stolen "
            f"{host['steal']:.0f}% ({os.cpu_count()} CPUs), so other processes "
            f"{max(0.0, host['busy'] - sum(cpu.values())):.0f}%"
        )
        bound = min(captured, args.max_entries)
        reached = "reached" if captured > args.max_entries else "NOT reached"
        print(
            f"signature store: {captured:,} receipts captured (one per completed tool stream), "
            f"bound {args.max_entries:,} {reached} -> holds {bound:,}; probes: newest {count} "
            f"still injected {sum(newest)}/{count}, oldest {count} evicted "
            f"{oldest_evicted}/{count} (held {oldest_held})"
        )
        print(
            f"after load: fake upstream open streams {fake_stats.get('open_streams')} "
            f"(started {fake_stats.get('started', 0):,}, ran to the end "
            f"{fake_stats.get('finished', 0):,}, cancelled by the proxy "
            f"{fake_stats.get('cancelled', 0):,}), proxy streamfix_active_streams {active:.0f}, "
            f"after {drained_after:.1f} s"
        )
        print(abandoned_upstreams(tally.cuts, ends))
        log_lines = proxy_log.read_text(errors="replace").splitlines()
        tracebacks = sum(line.startswith("Traceback") for line in log_lines)
        # The eviction probes draw one placeholder warning each: expected, not shown.
        placeholders = [line for line in log_lines if "signatures_placeholders:" in line]
        others = [line for line in log_lines if "signatures_placeholders:" not in line]
        print(
            f"proxy log (warning and above): {len(log_lines)} lines, {len(placeholders)} of them "
            f"signatures_placeholders (one per evicted probe: {oldest_evicted}), "
            f"{tracebacks} tracebacks"
        )
        if args.timeline:
            print_timeline(load_samples, tally, pids)
        for line in others[:5]:
            print(f"    {line[:300]}")

        failures = []
        if tally.errors:
            failures.append("errors")
        if fake_stats.get("open_streams") != 0 or active != 0:
            failures.append("streams left open")
        expected_started = tally.started + 2  # + the two references
        if not tally.errors and fake_stats.get("started") != expected_started:
            failures.append(f"fake saw {fake_stats.get('started')} streams, not {expected_started}")
        # One receipt per tool stream the proxy finished (+ the reference): every completed one,
        # and at most the abandoned ones whose end the proxy had already sent.
        if not len(tools) + 1 <= captured <= len(tools) + 1 + tally.disconnected:
            failures.append(f"captured {captured}, completed tool streams {len(tools) + 1}")
        if not all(newest):
            failures.append("a recent receipt was not injected")
        if captured - count > args.max_entries and oldest_evicted != count:
            failures.append("an old receipt survived beyond the bound")
        if tracebacks:
            failures.append("tracebacks in the proxy log")
        if len(placeholders) != oldest_evicted:
            failures.append("signature placeholders other than the eviction probes'")
        print("RESULT: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
        return 0 if not failures else 1
    finally:
        for client in clients:
            await client.aclose()
        await control.aclose()
        stop(proxy)
        stop(fake)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--disconnect-fraction", type=float, default=0.2)
    parser.add_argument("--emit", choices=("atomic", "incremental"), default="atomic")
    parser.add_argument(
        "--max-entries", type=int, default=1_000, help="signatures.max_entries (small: reached)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeline", action="store_true", help="print one row per second")
    parser.add_argument("--log-dir", help="keep the proxy's and the fake's logs here")
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return
    # The whole run is bounded (the load itself gets seconds + 90): SIGALRM cancels soak(),
    # whose `finally` ends the children.
    signal.alarm(int(args.seconds) + 240)
    with tempfile.TemporaryDirectory(prefix="streamfix-soak-") as workdir:
        if args.log_dir:
            workdir = args.log_dir
            Path(workdir).mkdir(parents=True, exist_ok=True)
        try:
            status = asyncio.run(soak(args, Path(workdir)))
        except asyncio.CancelledError:
            print("RESULT: FAIL: hard time limit reached", flush=True)
            status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
