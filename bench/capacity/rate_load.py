"""Open-loop load for the capacity bench's `rate` phase, in its own process.

Requests are due at a fixed rate, whatever the server answers: each is sent when due on an
idle keep-alive connection (a new one when none is idle), and its latency runs from when it was
due to the end of its response, so a server that falls behind is charged for the queue it
causes (no coordinated omission). The HTTP client is bench/perf_load.py's (pre-built request
bytes, a header scan and chunk reads), cheap enough that the client is not what saturates.

Reads one JSON job per line on stdin ({"port", "model", "stream", "rate", "seconds", "warmup",
"timeout"}) and answers one JSON line: requests due and done, errors by kind, the latencies'
p50/p99/max of those due after the warm-up, and the rate achieved.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf_fake import run
from perf_load import Connection, request_bytes

MAX_IN_FLIGHT = 2000
"""Connections the client opens at most; a request due past that counts as an error."""
now = time.monotonic


async def job(spec: dict[str, Any]) -> dict[str, Any]:
    port, rate = spec["port"], float(spec["rate"])
    raw = request_bytes(port, spec["model"], bool(spec["stream"]))
    idle: list[Connection] = []
    in_flight = 0
    latencies: list[float] = []
    errors: dict[str, int] = {}
    done = 0
    total = int(rate * (spec["warmup"] + spec["seconds"]))
    measured_from = int(rate * spec["warmup"])

    def error(kind: str) -> None:
        errors[kind] = errors.get(kind, 0) + 1

    async def one(number: int, due: float) -> None:
        nonlocal in_flight, done
        connection = idle.pop() if idle else Connection(port)
        try:
            result = await asyncio.wait_for(connection.request(raw), spec["timeout"])
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            connection.close()
            if number >= measured_from:
                error(type(exc).__name__)
            return
        finally:
            in_flight -= 1
        if connection.writer is not None:
            idle.append(connection)
        if number < measured_from:
            return
        if result.status != 200 or not result.complete:
            error(f"status {result.status}" if result.status != 200 else "incomplete")
            return
        done += 1
        latencies.append(now() - due)

    tasks = []
    start = now() + 0.05
    number = 0
    while number < total:
        moment = now()
        while number < total and start + number / rate <= moment:
            if in_flight >= MAX_IN_FLIGHT:
                if number >= measured_from:
                    error("client at its connection cap")
            else:
                in_flight += 1
                tasks.append(asyncio.ensure_future(one(number, start + number / rate)))
            number += 1
        if number < total:
            await asyncio.sleep(max(0.0, start + number / rate - now()))
    sent_in = now() - start
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=spec["timeout"])
        for task in pending:
            task.cancel()
    for connection in idle:
        connection.close()
    ordered = sorted(latencies)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    due = total - measured_from
    return {
        "due": due,
        "done": done,
        "errors": errors,
        "p50": at(0.5),
        "p99": at(0.99),
        "max": ordered[-1] if ordered else float("nan"),
        "sent_rate": total / sent_in if sent_in > 0 else 0.0,
    }


async def serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        answer = await job(json.loads(line))
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    run(serve())
