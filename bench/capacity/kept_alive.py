"""Phase `objects`: what each open stream allocates and keeps alive in the proxy.

One proxy with the probe (bench/capacity/probe/sitecustomize.py) and tracemalloc tracing from
start-up; a snapshot of the live objects (after a full collection) at rest, after a warm-up,
and again with N slow streams open. The difference, divided by N, is what one open stream
holds: the objects the collector tracks, by type (the collector's work grows with these), and
the bytes tracemalloc attributes to each allocating line (which includes untracked bytes and
strings). Then the clients leave mid-stream, and a third snapshot's collection counts the
cyclic garbage the streams left: what only the cycle collector reclaims, and what the frozen
heap (proxy/server/gc_tuning.py) would keep until its full collection. Tracing slows the proxy
down and inflates its memory; this phase measures nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any

from perf_procs import HOST, start, stop

from .open_streams import proxy_config, warm_up
from .processes import BENCH, RESULTS, ROOT, progress, start_proxy, start_upstream

TOP = 12


def upstream_open(port: int) -> int:
    with urllib.request.urlopen(f"http://{HOST}:{port}/stats", timeout=5) as answer:
        return int(json.loads(answer.read())["open"])


def snapshot(pid: int, probe: Path, number: int, timeout: float = 60) -> dict[str, Any]:
    """Ask the probe for dump `number`, and wait for it."""
    os.kill(pid, signal.SIGUSR1)
    path = probe / f"objects-{pid}-{number}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            time.sleep(0.2)  # written in one go, but let the heap file land too
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                pass
        time.sleep(0.2)
    raise RuntimeError(f"no probe dump {path} after {timeout:.0f} s")


def run(
    streams: int, config: dict[str, dict[str, Any]] | None = None, frames: int = 1
) -> dict[str, Any]:
    progress(f"objects: {streams:,} open streams, tracemalloc on")
    result: dict[str, Any] = {"streams": streams}
    with tempfile.TemporaryDirectory(prefix="streamfix-objects-") as tmp:
        work = Path(tmp)
        fake, fake_port = start_upstream(
            "capacity/clock_upstream.py", RESULTS / "logs" / "clock-upstream.log"
        )
        proxy = None
        client: subprocess.Popen | None = None
        try:
            env = {"CAPACITY_TRACEMALLOC": str(frames)}
            proxy = start_proxy(
                "objects", fake_port, proxy_config(streams, config or {}), work, env, 60
            )
            warm_up(proxy.port, work)
            before = snapshot(proxy.pid, proxy.probe, 1)
            client = start(
                [
                    sys.executable,
                    str(BENCH / "capacity" / "stream_clients.py"),
                    "--port",
                    str(proxy.port),
                    "--streams",
                    str(streams),
                    "--rate",
                    "200",
                    "--model",
                    "capacity-clock-600x1000",
                    "--events",
                    "600",
                    "--deadline",
                    str(streams / 200 + 120),
                    "--out",
                    str(work / "objects-client.json"),
                ],
                RESULTS / "logs" / "objects-client.log",
                cwd=ROOT,
            )
            deadline = time.monotonic() + streams / 200 + 60
            while upstream_open(fake_port) < streams and time.monotonic() < deadline:
                time.sleep(0.5)
            result["open_at_snapshot"] = upstream_open(fake_port)
            time.sleep(2)  # every stream past its first event
            after = snapshot(proxy.pid, proxy.probe, 2)
            result.update(difference(before, after, result["open_at_snapshot"]))
            heaps = [proxy.probe / f"heap-{proxy.pid}-{n}.bin" for n in (1, 2)]
            if all(h.exists() for h in heaps):
                result["allocations"] = heap_difference(*heaps, result["open_at_snapshot"])
            # The clients leave mid-stream: what the streams leave behind that only the cycle
            # collector could reclaim (frozen, it would wait for the full collection).
            stop(client)
            client = None
            deadline = time.monotonic() + 30
            while upstream_open(fake_port) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)  # each cut stream's upstream connection is closed, not pooled
            left = snapshot(proxy.pid, proxy.probe, 3)
            result["cyclic_garbage_per_stream"] = left["collected"] / max(streams, 1)
            result["tracked_after_streams_ended"] = left["tracked"]
        finally:
            stop(client)
            if proxy is not None:
                stop(proxy.process)
            stop(fake)
    return result


def difference(before: dict[str, Any], after: dict[str, Any], streams: int) -> dict[str, Any]:
    """Tracked objects per open stream, in all and by type (the largest first)."""
    per = max(streams, 1)
    kinds = set(before["types"]) | set(after["types"])
    grown = {k: after["types"].get(k, 0) - before["types"].get(k, 0) for k in kinds}
    top = sorted(grown.items(), key=lambda kv: -kv[1])[:TOP]
    return {
        "tracked_before": before["tracked"],
        "tracked_after": after["tracked"],
        "tracked_per_stream": (after["tracked"] - before["tracked"]) / per,
        "tasks_per_stream": (after["tasks"] - before["tasks"]) / per,
        "types_per_stream": [(k, n / per) for k, n in top],
    }


def heap_difference(before: Path, after: Path, streams: int) -> dict[str, Any]:
    """tracemalloc's bytes and blocks per open stream, by allocating line (the largest first)."""
    old = tracemalloc.Snapshot.load(str(before))
    new = tracemalloc.Snapshot.load(str(after))
    per = max(streams, 1)
    stats = new.compare_to(old, "lineno")
    total = sum(s.size_diff for s in stats)
    return {
        "bytes_per_stream": total / per,
        "blocks_per_stream": sum(s.count_diff for s in stats) / per,
        "top": [
            {
                "where": f"{_short(s.traceback[0].filename)}:{s.traceback[0].lineno}",
                "bytes_per_stream": s.size_diff / per,
                "blocks_per_stream": s.count_diff / per,
            }
            for s in stats[:TOP]
        ],
    }


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return os.path.relpath(filename, ROOT) if filename.startswith(str(ROOT)) else filename


def lines(result: dict[str, Any]) -> list[str]:
    out = [
        f"objects: {result['open_at_snapshot']:,} open streams; per stream "
        f"{result['tracked_per_stream']:.1f} objects the collector tracks "
        f"({result['tracked_before']:,} -> {result['tracked_after']:,} in all), "
        f"{result['tasks_per_stream']:.2f} tasks",
        "  by type: "
        + ", ".join(f"{kind} {n:.1f}" for kind, n in result["types_per_stream"] if n >= 0.5),
    ]
    if "cyclic_garbage_per_stream" in result:
        out.append(
            f"  after the clients left mid-stream: {result['cyclic_garbage_per_stream']:.2f} "
            "objects of cyclic garbage per stream (what only the cycle collector reclaims), "
            f"{result['tracked_after_streams_ended']:,} objects tracked in all"
        )
    heap = result.get("allocations")
    if heap:
        out.append(
            f"  tracemalloc: {heap['bytes_per_stream'] / 1024:.1f} KiB in "
            f"{heap['blocks_per_stream']:.0f} blocks per stream, by line:"
        )
        out += [
            f"    {t['bytes_per_stream']:8.0f} B {t['blocks_per_stream']:6.1f} blocks  {t['where']}"
            for t in heap["top"]
        ]
    return out
