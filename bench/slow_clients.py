"""Slow and idle clients against a real proxy process: how many it still holds, and its memory.

Starts, on 127.0.0.1 only, the fake upstream (bench/perf_fake.py) and the proxy from `--root`
(`python -m proxy serve --upstream http://127.0.0.1:FAKE/v1 --port P --log-level warning`,
a checkout of any commit: `git worktree add /tmp/before 4c4a637` gives the code before the
client limits). Then opens, all at once:

- `--idle` connections that send nothing;
- `--slowloris` connections that drip a request head that never ends, a byte every
  `--drip-every` seconds;
- `--bodies` connections that send a chat request head declaring `--body-mib` MiB and a bit,
  send `--body-mib` MiB of it as fast as the proxy reads, then stop (an unfinished upload).

Every `--report-every` seconds, until `--seconds` have passed, one line: how many connections
of each kind the proxy still holds (it has not closed them), the proxy's resident memory
(VmRSS, and its peak VmHWM, from /proc/PID/status), and whether a fresh client still gets an
answer (`GET /healthz` and a non-streamed chat request, each with a 2 s timeout). At the end,
what the closed ones were answered (status codes), then everything is closed and stopped.

    python bench/slow_clients.py [--root DIR] [--idle 1000] [--slowloris 200] [--bodies 60]
                                 [--body-mib 15] [--drip-every 1.0] [--seconds 45]
                                 [--report-every 5] [--config FILE]

The run is bounded: start-up waits at most 20 s, the attack lasts `--seconds` (at most 120).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import resource
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import proxy_environ, stop

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MIB = 1024 * 1024
STARTUP_TIMEOUT = 20.0
PROBE_TIMEOUT = 2.0
CHAT_HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
)
NORMAL_BODY = b'{"model": "bench-json-1", "messages": [{"role": "user", "content": "hi"}]}'


@dataclass
class Held:
    """One attacking connection: open until the proxy closes it; what it answered, if any."""

    kind: str
    closed_at: float | None = None
    answer: bytes = b""


@dataclass
class Attack:
    connections: list[Held] = field(default_factory=list)
    tasks: list[asyncio.Task] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def held(self, kind: str) -> int:
        return sum(1 for c in self.connections if c.kind == kind and c.closed_at is None)

    def answers(self, kind: str) -> dict[str, int]:
        counts: collections.Counter[str] = collections.Counter()
        for c in self.connections:
            if c.kind == kind and c.closed_at is not None:
                counts[c.answer.split(b" ", 2)[1].decode() if c.answer else "closed"] += 1
        return dict(counts)


# ── processes ────────────────────────────────────────────────────────────────


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{what} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port} within {STARTUP_TIMEOUT}s")


def start(command: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=cwd, env=proxy_environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def memory_mib(pid: int) -> tuple[float, float]:
    """VmRSS and VmHWM of `pid`, in MiB (0 when the process is gone)."""
    values = {"VmRSS": 0.0, "VmHWM": 0.0}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in values:
                values[name] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def allow_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        limit = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


# ── the attack ───────────────────────────────────────────────────────────────


async def watch(reader: asyncio.StreamReader, held: Held) -> None:
    """Reads until the proxy closes the connection; keeps the first bytes it answered."""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if len(held.answer) < 64:
                held.answer += data[:64]
    except (ConnectionError, OSError):
        pass
    held.closed_at = time.monotonic()


async def open_one(port: int, kind: str, attack: Attack) -> tuple[asyncio.StreamWriter, Held]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    held = Held(kind)
    attack.connections.append(held)
    attack.writers.append(writer)
    attack.tasks.append(asyncio.create_task(watch(reader, held)))
    return writer, held


async def idle(port: int, attack: Attack) -> None:
    await open_one(port, "idle", attack)


async def slowloris(port: int, every: float, attack: Attack) -> None:
    writer, held = await open_one(port, "slowloris", attack)
    head = CHAT_HEAD + b"".join(b"x-pad-%d: y\r\n" % n for n in range(100_000))
    with contextlib.suppress(ConnectionError, OSError):
        for byte in head:
            if held.closed_at is not None:
                return
            writer.write(bytes([byte]))
            await asyncio.sleep(every)


async def unfinished_body(port: int, mib: int, attack: Attack) -> None:
    writer, held = await open_one(port, "bodies", attack)
    piece = b"x" * MIB
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(CHAT_HEAD + b"content-length: %d\r\n\r\n" % (mib * MIB + 1024))
        for _ in range(mib):
            if held.closed_at is not None:
                return
            writer.write(piece)
            await writer.drain()
    # ...and never the last 1024 bytes.


async def probe(port: int, request: bytes) -> str:
    """A fresh client's request: its status, or what went wrong, within PROBE_TIMEOUT."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(request)
                line = await reader.readline()
            finally:
                writer.close()
        return line.split(b" ", 2)[1].decode() if line else "closed"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return type(exc).__name__


async def attack(args: argparse.Namespace, port: int, pid: int) -> None:
    state = Attack()
    openings = [idle(port, state) for _ in range(args.idle)]
    openings += [slowloris(port, args.drip_every, state) for _ in range(args.slowloris)]
    openings += [unfinished_body(port, args.body_mib, state) for _ in range(args.bodies)]
    senders = [asyncio.create_task(opening) for opening in openings]
    healthz = b"GET /healthz HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n\r\n"
    chat = CHAT_HEAD + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(NORMAL_BODY)
    print(
        f"{'t(s)':>5} {'idle':>5} {'slowloris':>9} {'bodies':>6} {'RSS MiB':>8} "
        f"{'peak MiB':>8}  fresh client: healthz, chat"
    )
    try:
        until = state.started + args.seconds
        while True:
            now = time.monotonic()
            rss, peak = memory_mib(pid)
            fresh = await asyncio.gather(probe(port, healthz), probe(port, chat + NORMAL_BODY))
            print(
                f"{now - state.started:5.1f} {state.held('idle'):5d} "
                f"{state.held('slowloris'):9d} {state.held('bodies'):6d} {rss:8.0f} "
                f"{peak:8.0f}  {', '.join(fresh)}",
                flush=True,
            )
            if now >= until:
                break
            await asyncio.sleep(min(args.report_every, max(until - time.monotonic(), 0)))
        for kind in ("idle", "slowloris", "bodies"):
            print(f"answers to the closed {kind}: {state.answers(kind) or '-'}")
    finally:
        for task in senders + state.tasks:
            task.cancel()
        for writer in state.writers:
            writer.close()
        await asyncio.gather(*senders, *state.tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout the proxy runs from")
    parser.add_argument("--config", help="a config file for the proxy")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slowloris", type=int, default=200)
    parser.add_argument("--bodies", type=int, default=60)
    parser.add_argument("--body-mib", type=int, default=15)
    parser.add_argument("--drip-every", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--report-every", type=float, default=5.0)
    args = parser.parse_args()
    args.seconds = min(args.seconds, 120.0)
    allow_open_files(args.idle + args.slowloris + args.bodies + 256)

    fake_port, proxy_port = free_port(), free_port()
    fake = start([sys.executable, str(HERE / "perf_fake.py"), "--port", str(fake_port)], ROOT)
    proxy = None
    try:
        wait_listening(fake_port, fake, "the fake upstream")
        command = [sys.executable, "-m", "proxy", "serve", "--log-level", "warning"]
        command += ["--upstream", f"http://127.0.0.1:{fake_port}/v1", "--port", str(proxy_port)]
        command += ["--config", str(Path(args.config).resolve())] if args.config else []
        proxy = start(command, args.root.resolve())
        wait_listening(proxy_port, proxy, "the proxy")
        print(f"proxy from {args.root.resolve()} (pid {proxy.pid}) on port {proxy_port}")
        asyncio.run(attack(args, proxy_port, proxy.pid))
    finally:
        stop(proxy, grace=10)
        stop(fake, grace=10)


if __name__ == "__main__":
    main()
