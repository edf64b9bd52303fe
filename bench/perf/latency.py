"""Phase 3, added latency: concurrency 1, non-streamed and a 20-event stream, the targets
interleaved request by request; LiteLLM in a block of its own with direct."""

from __future__ import annotations

from typing import Any

from .config import BASELINE, OWN_LATENCY_BLOCK, SHORT, Plan, progress
from .load import LoadGenerator
from .servers import Target
from .settle import Settler

LATENCY_KINDS = (("json", "perf-json", False), ("short", f"perf-text-{SHORT}", True))


def latency_blocks(targets: list[Target]) -> list[list[Target]]:
    """Block 1 interleaves the baseline with every target but those of `OWN_LATENCY_BLOCK`;
    each of those gets a block of its own with the baseline, whose samples it is compared
    with. Interleaved with the others, its leftovers (LiteLLM) or its footprint in the caches
    (Portkey's Node process) would land on their next requests."""
    baseline = [t for t in targets if t.name == BASELINE]
    first = [t for t in targets if t.name not in OWN_LATENCY_BLOCK]
    return [first] + [[*baseline, t] for t in targets if t.name in OWN_LATENCY_BLOCK]


def phase_latency(load: LoadGenerator, targets: list[Target], plan: Plan, settler: Settler) -> dict:
    """Every kind of block 1 runs before any other block, so no leftovers of a target that
    leaves work behind overlap a measurement of block 1."""
    blocks: list[dict[str, Any]] = []
    for number, members in enumerate(latency_blocks(targets), 1):
        names = [t.name for t in members]
        block = {
            "block": number,
            "targets": names,
            "baseline": f"{BASELINE} samples of this block",
            "kinds": {},
        }
        blocks.append(block)
        for kind, model, stream in LATENCY_KINDS:
            progress(
                f"latency block {number} ({', '.join(names)}): {plan.latency_requests} {kind} "
                "requests per target, interleaved"
            )
            settler.before(names, f"latency block {number}, {kind}")
            job = {
                "job": "latency",
                "targets": {t.name: t.port for t in members},
                "pids": {t.name: t.pid for t in members if t.pid is not None},
                "kinds": [[kind, model, stream]],
                "warmup": plan.latency_warmup,
                "requests": plan.latency_requests,
                "timeout": 30,
            }
            budget = 60 + (plan.latency_requests + plan.latency_warmup) * len(members) * 0.5
            block["kinds"].update(load.run(job, budget))
    return {"blocks": blocks}
