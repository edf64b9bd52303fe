"""What one request costs a proxy that was idle before it: sequential requests with a pause
between them, back to back up to tens of milliseconds apart, through direct, the raw TCP relay,
the do-nothing proxy and streamfix.

    python bench/request_gap.py                     # about 1 minute
    python bench/request_gap.py --gaps 0,10 --requests 300 --kind stream
    python bench/request_gap.py --profile 10        # also py-spy on streamfix at each gap

An agent's requests come seconds apart, not back to back. Between two of them whatever else
runs on the machine (the client, the upstream, other work) takes the caches, and the proxy's
next request finds its code and data cold; at concurrency 1 the proxy's added latency is its
CPU on that request, so a larger code path costs more than its back-to-back figure says.

Processes (bench/perf's, all on 127.0.0.1, each in its own process group, ended in
`finally`): the fake upstream (bench/perf_fake.py), the relay (bench/perf_relay.py), `python -m
proxy serve` with `repairs.enabled = false` (do-nothing) and with its defaults (streamfix). The
client is bench/perf_load.py's raw HTTP/1.1 client in this process, one keep-alive connection
per target. For each gap, each target in turn (who goes first rotating) gets `--warmup`
requests back to back, then `--requests` requests each after `time.sleep(gap)`: the median
time to the last byte, less direct's at the same gap, and the server's CPU per request (its
process tree, from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.config import BENCH, RESULTS, ROOT
from perf.figures import format_table
from perf.profile import format_profile, summarize_profile
from perf.servers import Target, clean_env, start_relay, start_streamfix, wait_ready
from perf_load import Connection, request_bytes
from perf_procs import cpu_seconds, free_port, start, stop

MODELS = {"json": ("perf-json", False), "stream": ("perf-text-20", True)}


def measure(target: Target, kind: str, gap: float, warmup: int, requests: int) -> dict[str, float]:
    """Median seconds to the last byte and server CPU seconds per request, `gap` apart."""

    async def run() -> dict[str, float]:
        model, stream = MODELS[kind]
        raw = request_bytes(target.port, model, stream)
        connection = Connection(target.port)
        try:
            for _ in range(warmup):
                await connection.request(raw)
            times: list[float] = []
            before = cpu_seconds(target.pid) if target.pid else 0.0
            for _ in range(requests):
                if gap:
                    time.sleep(gap)  # the whole process idles: nothing runs in between
                result = await connection.request(raw)
                if result.status != 200 or not result.complete:
                    raise RuntimeError(f"{target.name}: status {result.status}")
                times.append(result.ttlb)
            cpu = (cpu_seconds(target.pid) - before) / requests if target.pid else 0.0
        finally:
            connection.close()
        return {"ttlb": statistics.median(times), "cpu": cpu}

    return asyncio.run(run())


def cell(found: dict[str, float], direct_ttlb: float) -> str:
    """`added / CPU`, in milliseconds."""
    return f"{(found['ttlb'] - direct_ttlb) * 1000:.3f} / {found['cpu'] * 1000:.3f}"


def profile(target: Target, kind: str, gap: float, seconds: float) -> str:
    """py-spy on `target` while it gets requests `gap` apart, summarized as perf's profile."""
    beside = Path(sys.executable).parent / "py-spy"
    spy = shutil.which("py-spy") or (str(beside) if beside.is_file() else None)
    if spy is None:
        return "profile: py-spy not found (python -m pip install py-spy)"
    raw = RESULTS / f"profile-gap-{kind}-{gap * 1000:g}ms.txt"
    raw.unlink(missing_ok=True)
    command = [spy, "record", "--pid", str(target.pid), "--duration", str(int(seconds))]
    command += ["--rate", "500", "--format", "raw", "--nonblocking", "--output", str(raw)]
    log = RESULTS / "logs" / "py-spy-gap.log"
    spying = start(command, log)
    try:
        time.sleep(1.0)  # py-spy attaching
        per_request = 0.0005 + gap
        measure(target, kind, gap, 0, max(50, int(seconds / per_request)))
        spying.wait(timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        pass
    finally:
        stop(spying)
    if not raw.exists():
        return f"profile: py-spy wrote nothing (see {log})"
    return format_profile({f"{kind} {gap * 1000:g} ms apart-c1": summarize_profile(raw)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gaps", default="0,1,3,10,30", help="milliseconds between requests")
    parser.add_argument("--requests", type=int, default=400, help="per target and gap")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--kind", choices=sorted(MODELS), default="json")
    parser.add_argument("--profile", type=float, default=0, metavar="SECONDS")
    args = parser.parse_args()
    gaps = [float(g) / 1000 for g in args.gaps.split(",")]
    RESULTS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="streamfix-gap-"))
    fake_port = free_port()
    fake = start(
        [sys.executable, str(BENCH / "perf_fake.py"), "--port", str(fake_port)],
        RESULTS / "logs" / "gap-fake.log",
        env=clean_env(),
        cwd=ROOT,
    )
    upstream = f"http://127.0.0.1:{fake_port}/v1"
    targets = [
        Target("direct", fake_port, None, "/health"),
        start_relay(free_port(), fake_port),
        start_streamfix("do-nothing", free_port(), upstream, {"repairs": {"enabled": False}}, work),
        start_streamfix("streamfix", free_port(), upstream, {}, work),
    ]
    load_start = os.getloadavg()[0]
    try:
        wait_ready(Target("fake", fake_port, fake, "/health"), 20)
        for target in targets[1:]:
            wait_ready(target, 30)
        # For a profiler of one's own (perf record -p PID): which process is which.
        pids = ", ".join(f"{t.name} {t.pid}" for t in targets[1:])
        print(f"[pids: {pids}]", file=sys.stderr, flush=True)
        found: dict[float, dict[str, dict[str, float]]] = {}
        for number, gap in enumerate(gaps):
            turn = targets[number % len(targets) :] + targets[: number % len(targets)]
            found[gap] = {
                t.name: measure(t, args.kind, gap, args.warmup, args.requests) for t in turn
            }
            print(f"[gap {gap * 1000:g} ms done]", file=sys.stderr, flush=True)
        rows = []
        for gap, per in found.items():
            base = per["direct"]["ttlb"]
            rows.append(
                [
                    f"{gap * 1000:g} ms" + (" (back to back)" if not gap else ""),
                    f"[{base * 1000:.3f}]",
                    *(cell(per[t.name], base) for t in targets[1:]),
                ]
            )
        header = ["gap before each request", "direct", *(t.name for t in targets[1:])]
        print(
            f"{args.kind}, {args.requests} requests per target and gap; added ms (median to "
            "the last byte, less direct's) / server CPU ms per request; load average "
            f"{load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end\n"
        )
        print(format_table(rows, header))
        if args.profile:
            streamfix = targets[-1]
            for gap in (gaps[0], gaps[-1]):
                print()
                print(profile(streamfix, args.kind, gap, args.profile))
    finally:
        for target in targets:
            stop(target.process)
        stop(fake)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
