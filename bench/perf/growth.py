"""Phase 6, growth: RSS before and after many sequential exchanges (capped in time)."""

from __future__ import annotations

from .config import NO_GROWTH, SHORT, Plan, progress
from .load import LoadGenerator
from .servers import Target
from .settle import Settler


def phase_growth(load: LoadGenerator, targets: list[Target], plan: Plan, settler: Settler) -> dict:
    out = {}
    models = [["perf-json", False], [f"perf-text-{SHORT}", True], [f"gemini-gtools-{SHORT}", True]]
    for target in targets:
        if target.pid is None or target.name in NO_GROWTH:
            continue
        progress(f"growth: up to {plan.growth_exchanges} sequential exchanges via {target.name}")
        settler.before([target.name], f"growth: {target.name}")
        job = {
            "job": "sequential",
            "port": target.port,
            "pid": target.pid,
            "models": models,
            "count": plan.growth_exchanges,
            "max_seconds": plan.growth_seconds,
            "timeout": 30,
        }
        out[target.name] = load.run(job, plan.growth_seconds + 120)
    return out
