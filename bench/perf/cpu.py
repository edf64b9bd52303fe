"""Phase 5, CPU: server CPU seconds per 10,000 upstream events from a fixed load at c=50."""

from __future__ import annotations

from typing import Any

from .config import EVENTS, MODELS, Plan, progress
from .load import LoadGenerator
from .rounds import run_rounds
from .servers import Target
from .settle import Settler, pids


def phase_cpu(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake: int, settler: Settler
) -> dict:
    out: dict[str, Any] = {}
    count = max(plan.rounds, plan.cpu_events // EVENTS)
    for kind in ("text", "gtools"):
        progress(f"cpu: {count} {kind} streams ({count * EVENTS} events) at concurrency 50")

        def job_for(target: Target, number: int, k: str = kind) -> dict:
            share = count // plan.rounds + (1 if number < count % plan.rounds else 0)
            return {
                "job": "load",
                "port": target.port,
                "model": MODELS[k],
                "concurrency": 50,
                "count": share,
                "timeout": 60,
                "pids": pids(target, fake),
            }

        found = run_rounds(load, targets, plan.rounds, job_for, 400, settler, f"cpu {kind}")
        for result in found.values():
            events = result["completed"] * EVENTS
            result["events"] = events
            result["cpu_per_10k_events"] = {
                name: seconds * 10_000 / events if events else None
                for name, seconds in result["cpu"].items()
            }
        out[kind] = found
    return out
