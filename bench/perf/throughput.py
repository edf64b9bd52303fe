"""Phase 4, throughput: closed-loop workers on 50-event streams at several concurrencies, in
rounds; the best round counts."""

from __future__ import annotations

from typing import Any

from .config import EVENTS, MODELS, Plan, progress
from .load import LoadGenerator
from .rounds import run_rounds
from .servers import Target
from .settle import Settler, pids


def phase_throughput(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake: int, settler: Settler
) -> dict:
    out: dict[str, Any] = {}
    for kind, levels in plan.concurrency.items():
        for concurrency in levels:
            progress(f"throughput: {kind} at concurrency {concurrency}")

            def job_for(target: Target, number: int, c: int = concurrency, k: str = kind) -> dict:
                return {
                    "job": "load",
                    "port": target.port,
                    "model": MODELS[k],
                    "concurrency": c,
                    "seconds": plan.window,
                    "warmup": plan.warmup,
                    "timeout": 60,
                    "pids": pids(target, fake),
                }

            found = run_rounds(
                load,
                targets,
                plan.rounds,
                job_for,
                plan.window + 240,
                settler,
                f"throughput {kind} c={concurrency}",
            )
            for result in found.values():
                # Throughput: the best round (a busy spell elsewhere on the machine only ever
                # slows a round down); CPU per event: all rounds together.
                seconds = result["seconds"]
                rates = [r["requests"] / r["seconds"] for r in result["rounds"]]
                result["events_per_s_by_round"] = [rate * EVENTS for rate in rates]
                result["requests_per_s"] = max(rates)
                result["events_per_s"] = result["requests_per_s"] * EVENTS
                result["server_cores"] = result["cpu"].get("server", 0) / seconds
                server = result["cpu"].get("server")
                events = result["requests"] * EVENTS
                result["server_cpu_per_10k_events"] = (
                    server * 10_000 / events if server is not None and events else None
                )
            out.setdefault(kind, {})[str(concurrency)] = found
    return out
