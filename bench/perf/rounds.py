"""Loads cut into rounds, the targets taking turns round by round, so that a busy spell of the
machine lands on every target alike."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .load import LoadGenerator
from .servers import Target
from .settle import Settler


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One load's figures from its rounds: counts, bytes, seconds and CPU added up."""
    total: dict[str, Any] = {"rounds": rounds, "problems": [], "cpu": Counter()}
    for key in ("completed", "errors", "incomplete", "bytes", "requests", "seconds", "client_cpu"):
        total[key] = sum(r[key] for r in rounds)
    for r in rounds:
        total["cpu"].update(r["cpu"])
        total["problems"] += r["problems"][: 5 - len(total["problems"])]
    total["cpu"] = dict(total["cpu"])
    total["response_bytes"] = rounds[0]["response_bytes"]
    return total


def run_rounds(
    load: LoadGenerator,
    targets: list[Target],
    rounds: int,
    job_for: Any,
    timeout: float,
    settler: Settler,
    what: str,
) -> dict[str, dict[str, Any]]:
    """`rounds` rounds, each target's job once per round, targets taking turns."""
    parts: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
    for number in range(rounds):
        for target in targets:
            settler.before([target.name], f"{what}, round {number + 1}: {target.name}")
            parts[target.name].append(load.run(job_for(target, number), timeout))
    return {name: combine(found) for name, found in parts.items()}
