"""The load generator (bench/perf_load.py) in its own process: one JSON job per line in, one
answer per line out, so one warm interpreter serves the whole run."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from typing import Any

from perf_procs import start

from .config import BENCH, RESULTS, ROOT, Failed
from .servers import clean_env


class LoadGenerator:
    """bench/perf_load.py in its own process: a job per line in, an answer per line out."""

    def __init__(self) -> None:
        self.process = start(
            [sys.executable, str(BENCH / "perf_load.py")],
            RESULTS / "logs" / "load.log",
            env=clean_env(),
            cwd=ROOT,
            pipes=True,
        )
        self.answers: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(line)
        self.answers.put(b"")

    def run(self, job: dict[str, Any], timeout: float, on_event: Any = None) -> dict[str, Any]:
        """Run `job`; `on_event(name)` hears the job's announcements before its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(job).encode() + b"\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty as exc:
                raise Failed(
                    f"load generator: no answer to {job['job']} in {timeout:.0f} s"
                ) from exc
            if not line:
                raise Failed("load generator exited (see bench/results/logs/load.log)")
            answer = json.loads(line)
            if "event" not in answer:
                break
            if on_event is not None:
                on_event(answer["event"])
        if not answer["ok"]:
            raise Failed(f"load generator: {job['job']}: {answer['error']}")
        return answer["result"]
