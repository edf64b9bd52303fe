"""Phase `streams`: N slow streams held open through one proxy worker, opened gradually or all
at once; per case the errors, the proxy's RSS and CPU, the lag from the upstream's write to the
client's read, the heads' times and the collector's pauses.

Each case gets a fresh upstream (bench/capacity/clock_upstream.py) and a fresh proxy, so the
idle RSS is the case's own; the clients are separate processes
(bench/capacity/stream_clients.py), one per `PER_CLIENT` streams, each opening its share at its
share of the rate, so together they open `rate` streams a second.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf_procs import cpu_seconds, start, stop

from .processes import (
    BENCH,
    RESULTS,
    ROOT,
    Meter,
    Proxy,
    loadavg,
    machine_ticks,
    pin,
    progress,
    quantile,
    start_proxy,
    start_upstream,
)

PER_CLIENT = 5000
"""Streams per client process: one event loop reads 5,000 events a second with room to spare."""
DESCRIPTORS_AT_REST = 64
"""The proxy's open files besides its connections (listener, logs, pipes), rounded up."""


@dataclass(frozen=True)
class Case:
    streams: int
    rate: float  # streams opened a second; 0: all at once
    events: int = 30
    gap_ms: int = 1000

    @property
    def label(self) -> str:
        opened = "at once" if not self.rate else f"{self.rate:g}/s"
        return f"{self.streams:,} streams, {opened}"

    @property
    def model(self) -> str:
        return f"capacity-clock-{self.events}x{self.gap_ms}"

    def seconds(self) -> float:
        """How long the case takes at most: opening, the last stream's events, and slack."""
        opening = self.streams / self.rate if self.rate else 0.0
        return opening + self.events * self.gap_ms / 1000 + 30


@dataclass(frozen=True)
class Variant:
    """One proxy configuration measured in every case."""

    name: str
    config: dict[str, dict[str, Any]]
    env: dict[str, str]


def proxy_config(streams: int, extra: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The defaults, but room for `streams` connections (server.max_connections is 2,048)."""
    server = {"max_connections": max(2048, streams + 100)}
    return {**extra, "server": {**server, **extra.get("server", {})}}


def run_case(case: Case, variant: Variant | None, work: Path) -> dict[str, Any]:
    """One case against one proxy variant (None: direct to the upstream, the floor)."""
    name = variant.name if variant else "direct"
    progress(f"{case.label} through {name}")
    result: dict[str, Any] = {"case": case.label, "target": name, "load_start": loadavg()}
    fake, fake_port = start_upstream(
        "capacity/clock_upstream.py", RESULTS / "logs" / "clock-upstream.log"
    )
    proxy: Proxy | None = None
    clients: list[subprocess.Popen] = []
    try:
        port = fake_port
        if variant is not None:
            proxy = start_proxy(
                name, fake_port, proxy_config(case.streams, variant.config), work, variant.env
            )
            port = proxy.port
            result["command"] = proxy.command
            warm_up(port, work)
            time.sleep(0.5)
        meter = Meter(proxy.pid if proxy else fake.pid)
        meter.begin()
        ticks = machine_ticks()
        bench_cpu = [cpu_seconds(fake.pid)]
        began = time.monotonic()
        count = max(1, math.ceil(case.streams / PER_CLIENT))
        outputs = []
        for number in range(count):
            share = case.streams // count + (1 if number < case.streams % count else 0)
            out = work / f"client-{name}-{number}.json"
            outputs.append(out)
            clients.append(
                start(
                    [
                        sys.executable,
                        str(BENCH / "capacity" / "stream_clients.py"),
                        "--port",
                        str(port),
                        "--streams",
                        str(share),
                        "--rate",
                        str(case.rate / count),
                        "--model",
                        case.model,
                        "--events",
                        str(case.events),
                        "--deadline",
                        str(case.seconds()),
                        "--out",
                        str(out),
                    ],
                    RESULTS / "logs" / f"clients-{number}.log",
                    cwd=ROOT,
                )
            )
            pin(clients[-1].pid, "others")
        deadline = began + case.seconds() + 30
        clients_cpu = dict.fromkeys(c.pid for c in clients)
        while any(c.poll() is None for c in clients) and time.monotonic() < deadline:
            meter.sample()
            for client in clients:
                seconds = cpu_seconds(client.pid)
                if seconds:  # 0 once it has exited
                    clients_cpu[client.pid] = seconds
            time.sleep(0.5)
        result["cpu_seconds"] = meter.cpu()
        busy, total = machine_ticks()
        elapsed = time.monotonic() - began
        result["machine_busy"] = (busy - ticks[0]) / max(total - ticks[1], 1)
        upstream_cpu = cpu_seconds(fake.pid) - bench_cpu[0]
        ours = result["cpu_seconds"] if proxy else 0.0
        ours += upstream_cpu + sum(v or 0.0 for v in clients_cpu.values())
        cores = os.cpu_count() or 1
        result["others_busy"] = max(0.0, result["machine_busy"] - ours / elapsed / cores)
        result["rss_idle"] = meter.rss_start
        result["rss_peak"] = meter.rss_peak
        result["seconds"] = time.monotonic() - began
        result["load_end"] = loadavg()
        result.update(merge([json.loads(o.read_text()) for o in outputs if o.exists()]))
        result["clients_missing"] = sum(not o.exists() for o in outputs)
        result["cpu_split"] = cpu_split(meter.samples, began, result, case)
        if proxy is not None:
            pauses, reports = proxy.gc_pauses()
            result["gc"] = {**gc_summary(pauses, began), "probe_reports": reports}
    finally:
        for client in clients:
            stop(client)
        if proxy is not None:
            stop(proxy.process)
        stop(fake)
    return result


def cpu_split(
    samples: list[tuple[float, int, float]], began: float, result: dict[str, Any], case: Case
) -> dict[str, float]:
    """CPU per event, from the window when every stream is open and none has ended (events
    only), and CPU per stream opened: the opening window's CPU less its events' share."""
    opened_at = result.get("last_opened_at", 0.0)
    first_end = began + case.events * case.gap_ms / 1000
    steady = [s for s in samples if opened_at + 1 <= s[0] <= first_end - 1]
    if not opened_at or len(steady) < 4:
        return {}
    (t0, _, c0), (t1, _, c1) = steady[0], steady[-1]
    per_event = (c1 - c0) / (result["opened"] * (t1 - t0) / (case.gap_ms / 1000))
    opening = [s for s in samples if s[0] <= opened_at]
    if not opening:
        return {"per_event": per_event}
    cpu_opening = opening[-1][2] - samples[0][2]
    seconds = opening[-1][0] - began
    if seconds < 1.0:  # too short a window to tell opening from the events in it
        return {"per_event": per_event}
    events = result["opened"] * seconds / 2 / (case.gap_ms / 1000)  # half open, on average
    return {
        "per_event": per_event,
        "per_open": (cpu_opening - events * per_event) / max(result["opened"], 1),
    }


def warm_up(port: int, work: Path) -> None:
    """A few short streams, so that imports and first-use caches are not counted per stream."""
    out = work / "warm-up.json"
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "capacity" / "stream_clients.py"),
            "--port",
            str(port),
            "--streams",
            "20",
            "--model",
            "capacity-clock-3x10",
            "--events",
            "3",
            "--deadline",
            "20",
            "--out",
            str(out),
        ],
        check=True,
        timeout=60,
        cwd=ROOT,
    )


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The clients' samples together: errors, heads, lags (overall and in the steady state,
    after the last stream opened)."""
    errors: dict[str, int] = {}
    heads: list[float] = []
    written: list[float] = []
    lag: list[float] = []
    for part in parts:
        for kind, n in part["errors"].items():
            errors[kind] = errors.get(kind, 0) + n
        heads += part["heads"]
        written += part["written"]
        lag += part["lag"]
    opened_by = max((p["last_opened"] for p in parts), default=0.0)
    first_opened = min((p["first_opened"] for p in parts if p["first_opened"]), default=0.0)
    steady = [x for t, x in zip(written, lag, strict=True) if t >= opened_by]
    return {
        "first_opened_at": first_opened,
        "last_opened_at": opened_by,
        "streams": sum(p["streams"] for p in parts),
        "opened": sum(p["opened"] for p in parts),
        "finished": sum(p["finished"] for p in parts),
        "events_short": sum(p["events_short"] for p in parts),
        "errors": errors,
        "events": len(lag),
        "lag": figures(lag),
        "lag_steady": figures(steady),
        "lag_by_second": by_second(written, lag),
        "heads": figures(heads),
    }


def by_second(written: list[float], lag: list[float]) -> list[tuple[int, int, float, float]]:
    """(second from the first write, events, p99 and max lag) for each second of the case."""
    if not written:
        return []
    first = min(written)
    buckets: dict[int, list[float]] = {}
    for t, x in zip(written, lag, strict=True):
        buckets.setdefault(int(t - first), []).append(x)
    return [(s, len(v), quantile(v, 0.99), max(v)) for s, v in sorted(buckets.items())]


def figures(values: list[float]) -> dict[str, float]:
    return {
        "p50": quantile(values, 0.5),
        "p99": quantile(values, 0.99),
        "max": max(values) if values else float("nan"),
    }


def gc_summary(pauses: list[tuple[float, int, float, int]], since: float) -> dict[str, Any]:
    """The collections during the case: how many of each generation, the longest, in all."""
    during = [p for p in pauses if p[0] >= since]
    full = sorted((p[2] for p in during if p[1] == 2), reverse=True)
    return {
        "collections": [sum(1 for p in during if p[1] == g) for g in range(3)],
        "longest": max((p[2] for p in during), default=0.0),
        "longest_by_generation": [
            max((p[2] for p in during if p[1] == g), default=0.0) for g in range(3)
        ],
        "longest_five": sorted(((p[2], p[1]) for p in during), reverse=True)[:5],
        "full_longest": full[:3],
        "total_seconds": sum(p[2] for p in during),
    }


def run(cases: list[Case], variants: list[Variant], direct: bool) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="streamfix-capacity-") as tmp:
        work = Path(tmp)
        for case in cases:
            if direct:
                results.append(run_case(case, None, work))
            for variant in variants:
                results.append(run_case(case, variant, work))
    return results
