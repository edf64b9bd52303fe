"""The capacity bench's processes: the proxy under test (with the bench-only probe), its upstream,
and what they cost, read from /proc. Process groups, parent-death signals and stopping come
from bench/perf_procs.py; the config file and readiness from bench/perf/servers.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.servers import Target, clean_env, toml, wait_ready
from perf_procs import HOST, cpu_seconds, free_port, rss_bytes, serve_command, start, stop

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
RESULTS = BENCH / "results" / "capacity"
PROBE = Path(__file__).resolve().parent / "probe"


PINS: dict[str, set[int] | None] = {"proxy": None, "others": None}
"""CPUs for the proxy and for the bench's other processes (`--pin`): on two cores, the proxy on
one and the upstream and clients on the other, so that what the bench itself spends is not
taken from the worker it measures. None: wherever the scheduler puts them."""


def pin(pid: int, role: str) -> None:
    cpus = PINS[role]
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, cpus)


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def progress(message: str) -> None:
    print(f"[capacity {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Proxy:
    """A `streamfix serve` process, its probe's directory, and its port."""

    name: str
    port: int
    process: subprocess.Popen
    probe: Path
    command: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def workers(self) -> list[int]:
        """The pids that serve (the process itself, or its worker children)."""
        return _children(self.pid) or [self.pid]

    def gc_pauses(self) -> tuple[list[tuple[float, int, float, int]], int]:
        """(monotonic time, generation, seconds, collected) of every collection so far, and
        how many reports the probe wrote (one a second: none means it is not running)."""
        found, reports = [], 0
        for path in sorted(self.probe.glob("gc-*.jsonl")):
            for line in path.read_text().splitlines():
                report = json.loads(line)
                reports += 1
                found += [tuple(p) for p in report["pauses"]]
        return sorted(found), reports


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def start_upstream(script: str, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = start(
        [sys.executable, str(BENCH / script), "--port", str(port)],
        log,
        env=clean_env(),
        cwd=ROOT,
    )
    pin(process.pid, "others")
    wait_ready(Target("upstream", port, process, "/health"), 20)
    return process, port


def start_proxy(
    name: str,
    upstream_port: int,
    config: dict[str, dict[str, Any]],
    work: Path,
    env: dict[str, str] | None = None,
    ready_seconds: float = 30,
) -> Proxy:
    """`python -m proxy serve` from this checkout with `config` (TOML sections), the probe on
    its PYTHONPATH and its own probe directory under `work`."""
    port = free_port()
    probe = work / f"probe-{name}"
    probe.mkdir(parents=True, exist_ok=True)
    path = work / f"{name}.toml"
    path.write_text(toml(config))
    command = serve_command(f"http://{HOST}:{upstream_port}/v1", port, path)
    environ = {
        **clean_env(),
        "PYTHONPATH": os.pathsep.join([str(PROBE), str(ROOT)]),
        "CAPACITY_PROBE_DIR": str(probe),
        **(env or {}),
    }
    process = start(command, RESULTS / "logs" / f"{name}.log", env=environ, cwd=ROOT)
    pin(process.pid, "proxy")
    proxy = Proxy(name, port, process, probe, " ".join(["python", *command[1:]]))
    try:
        wait_ready(Target(name, port, process, "/healthz"), ready_seconds)
    except Exception:
        stop(process)
        raise
    return proxy


@dataclass
class Meter:
    """CPU and RSS of a process tree, sampled; the peak RSS seen."""

    pid: int
    cpu_start: float = 0.0
    rss_start: int = 0
    rss_peak: int = 0
    samples: list[tuple[float, int, float]] = field(default_factory=list)

    def begin(self) -> None:
        self.cpu_start = cpu_seconds(self.pid)
        self.rss_start = self.rss_peak = rss_bytes(self.pid)

    def sample(self) -> int:
        rss = rss_bytes(self.pid)
        self.rss_peak = max(self.rss_peak, rss)
        self.samples.append((time.monotonic(), rss, cpu_seconds(self.pid)))
        return rss

    def cpu(self) -> float:
        return cpu_seconds(self.pid) - self.cpu_start


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def loadavg() -> float:
    return os.getloadavg()[0]


__all__ = [
    "HOST",
    "Meter",
    "Proxy",
    "progress",
    "quantile",
    "start_proxy",
    "start_upstream",
    "stop",
]
