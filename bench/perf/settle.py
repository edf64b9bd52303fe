"""Settling: after a target that leaves work behind (LiteLLM), wait until every server's process
tree is quiet before the next measurement, so its leftovers land on no other target."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from perf_procs import cpu_seconds

from .config import (
    LEAVES_WORK_BEHIND,
    SETTLE_LIMIT,
    SETTLE_QUIET,
    SETTLE_WINDOW,
    progress,
)
from .servers import Target, fake_stats


def busy_cores(servers: dict[str, int]) -> dict[str, float]:
    """Each server process tree's CPU over one `SETTLE_WINDOW`, as a share of one core. CPU
    comes in clock ticks (10 ms), so under 2 % over 200 ms means no tick was charged."""
    before = {name: cpu_seconds(pid) for name, pid in servers.items()}
    started = time.monotonic()
    time.sleep(SETTLE_WINDOW)
    elapsed = time.monotonic() - started
    return {name: (cpu_seconds(pid) - before[name]) / elapsed for name, pid in servers.items()}


def settle(servers: dict[str, int]) -> tuple[float, bool, dict[str, float]]:
    """Wait until every server is quiet over one window, at most `SETTLE_LIMIT` seconds.
    Returns the seconds waited, whether it gave up, and the last window's shares."""
    started = time.monotonic()
    while True:
        shares = busy_cores(servers)
        waited = time.monotonic() - started
        if max(shares.values(), default=0.0) < SETTLE_QUIET:
            return waited, False, shares
        if waited >= SETTLE_LIMIT:
            return waited, True, shares


@dataclass
class Settler:
    """Remembers whether the last measurement included a target that leaves work behind, and
    if so lets the servers settle before the next one: otherwise LiteLLM's leftovers (its
    logging tasks and threads) are charged to whatever comes next on the two cores."""

    servers: dict[str, int]
    """Every server process tree to watch: target name (or "fake") -> pid."""
    waits: list[dict[str, Any]] = field(default_factory=list)
    owed_to: list[str] = field(default_factory=list)
    """The targets of the last measurement that leave work behind."""

    def before(self, names: list[str], what: str) -> None:
        """Call right before measuring the targets `names`; `what` names the measurement."""
        if self.owed_to:
            waited, gave_up, shares = settle(self.servers)
            self.waits.append(
                {
                    "before": what,
                    "after": self.owed_to,
                    "seconds": round(waited, 3),
                    "timed_out": gave_up,
                    "last_window_cores": {name: round(v, 3) for name, v in shares.items()},
                }
            )
            if gave_up:
                progress(f"settle: servers still busy after {waited:.1f} s, before {what}")
        self.owed_to = [name for name in names if name in LEAVES_WORK_BEHIND]

    def record(self) -> dict[str, Any]:
        """For perf.json (holds `waits` itself, so an aborted run still records them)."""
        return {
            "leaves_work_behind": sorted(LEAVES_WORK_BEHIND),
            "window_s": SETTLE_WINDOW,
            "quiet_below_cores": SETTLE_QUIET,
            "limit_s": SETTLE_LIMIT,
            "waits": self.waits,
        }


def settle_summary(record: dict[str, Any]) -> str:
    waits = record["waits"]
    if not waits:
        after = " or ".join(record["leaves_work_behind"])
        return f"settle: none needed (no measurement followed {after})"
    seconds = sorted(w["seconds"] for w in waits)
    longest = max(waits, key=lambda w: w["seconds"])
    gave_up = sum(w["timed_out"] for w in waits)
    return (
        f"settle after {', '.join(record['leaves_work_behind'])}: {len(waits)} waits until "
        f"every server was under {record['quiet_below_cores']:.0%} of a core over "
        f"{record['window_s'] * 1000:.0f} ms, {sum(seconds):.1f} s in all, median "
        f"{seconds[len(seconds) // 2]:.1f} s, longest {longest['seconds']:.1f} s (before "
        f"{longest['before']}), {gave_up} gave up at {record['limit_s']:.0f} s"
    )


def pids(target: Target, fake_pid: int) -> dict[str, int]:
    found = {"fake": fake_pid}
    if target.pid is not None:
        found["server"] = target.pid
    return found


def wait_fake_idle(fake_port: int, seconds: float) -> float:
    """Seconds until the fake writes no stream (proxies passed the disconnects on)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if fake_stats(fake_port)["open_streams"] == 0:
            return time.monotonic() - started
        time.sleep(0.2)
    return float("inf")
