"""Warm-up: every target through each kind of exchange once before anything is measured."""

from __future__ import annotations

import os

from .config import MODELS, progress
from .load import LoadGenerator
from .servers import Target


def phase_warmup(load: LoadGenerator, targets: list[Target]) -> None:
    progress("warm-up")
    models = [["perf-json", False], [MODELS["text"], True], [MODELS["gtools"], True]]
    for target in targets:
        job = {
            "job": "sequential",
            "port": target.port,
            "pid": target.pid or os.getpid(),
            "models": models,
            "count": 150,
            "max_seconds": 20,
            "timeout": 30,
        }
        load.run(job, 120)
