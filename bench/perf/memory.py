"""Phase 2, memory: idle RSS, then RSS with N slow streams held open (the per-stream cost)."""

from __future__ import annotations

from .config import Plan, progress
from .load import LoadGenerator
from .servers import Target
from .settle import Settler, wait_fake_idle


def phase_memory(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake_port: int, settler: Settler
) -> dict:
    out = {}
    # A slow stream: one event a second, 45 events; dropped by the client once measured.
    model = "perf-text-45-d1000"
    for target in targets:
        if target.pid is None:
            continue
        progress(f"memory: {plan.hold_streams} open streams through {target.name}")
        settler.before([target.name], f"memory: {target.name}")
        job = {
            "job": "hold",
            "port": target.port,
            "pid": target.pid,
            "model": model,
            "streams": plan.hold_streams,
            "settle": 1.0,
            "timeout": 40,
        }
        result = load.run(job, 120)
        result["upstream_closed_after_s"] = wait_fake_idle(fake_port, 60)
        out[target.name] = result
    return out
