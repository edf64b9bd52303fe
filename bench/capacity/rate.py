"""Phase `rate`: the requests a second each target sustains with p99 added latency under 20 ms,
non-streamed and streamed (a 20-event text stream, to its last byte).

The targets, in one run on one fake upstream (bench/perf_fake.py: a raw-asyncio server that
answers at once): **direct** (the client to the fake: the reference), the raw TCP **relay**
(bench/perf_relay.py), **do-nothing** (`streamfix serve` with `repairs.enabled = false`),
**streamfix** (its defaults), **streamfix-redis** (the receipts on a Redis the bench starts,
as more than one worker requires: every request looks up in it what the upstream refused
before), **streamfix-2w** (the same with `server.workers = 2`) and **litellm** (its proxy from
its own virtual environment, `--litellm-venv` or CAPACITY_LITELLM_VENV, configured as
bench/perf's: an OpenAI-compatible passthrough to the same fake, one worker, logging and
callbacks off; "not measured" when it is not installed). Every target but streamfix-2w runs
one process; 1 -> 2 workers is streamfix-2w against streamfix-redis.

The load (bench/capacity/rate_load.py, its own process) is open-loop: requests due at a fixed
rate, latency from when each was due. The rates climb a ladder; at each rung direct and every
target still climbing get one window each, in turn, and a target drops out at the first rung
where its p99 exceeds direct's p99 at that rung (or direct's median p99 so far, when lower) by
20 ms or more, or a request fails, or the client could not send at the rate, in two windows
running (one hiccup of the shared machine is not a verdict). One more rate halfway between its
last rung passed and the first failed refines the figure. After LiteLLM,
which keeps working after its responses, the next window waits until every server is quiet
(bench/perf/settle.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.servers import (
    Target,
    start_litellm,
    start_relay,
    start_streamfix,
    wait_ready,
)
from perf.settle import settle
from perf_procs import HOST, cpu_seconds, free_port, start, stop

from .processes import BENCH, RESULTS, ROOT, loadavg, progress

LADDER = (
    10,
    20,
    35,
    50,
    100,
    200,
    300,
    400,
    600,
    800,
    1000,
    1200,
    1500,
    1800,
    2200,
    2600,
    3000,
    3500,
    4000,
)
QUICK_LADDER = (100,)
KINDS = {"non-streamed": ("perf-json", False), "streamed": ("perf-text-20", True)}
ADDED_P99_LIMIT = 0.020
KEEPS_UP_P99 = 0.5
"""A target that falls behind the offered rate queues requests, and their latency from when
they were due grows through the window: past this p99 it did not keep up."""
LITELLM_SPEC = "litellm[proxy]==1.108.7"  # what bench/perf installs; here only found, never


@dataclass
class Climb:
    target: Target
    passed: dict[str, Any] | None = None
    """The highest window with p99 added latency under 20 ms, below the first that failed."""
    failed: dict[str, Any] | None = None
    kept_up: dict[str, Any] | None = None
    """The highest window it kept up with at all (p99 under `KEEPS_UP_P99`)."""
    stopped: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)


class Load:
    """bench/capacity/rate_load.py: a job a line in, an answer a line out."""

    def __init__(self) -> None:
        self.process = start(
            [sys.executable, str(BENCH / "capacity" / "rate_load.py")],
            RESULTS / "logs" / "rate-load.log",
            cwd=ROOT,
            pipes=True,
        )

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(job).encode() + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the load process exited (bench/results/capacity/logs)")
        return json.loads(line)


def start_redis(work: Path) -> tuple[subprocess.Popen | None, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        return None, ""
    port = free_port()
    process = start(
        [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"],
        RESULTS / "logs" / "redis.log",
        cwd=work,
    )
    return process, f"redis://{HOST}:{port}/0"


def litellm_executable(venv: str) -> Path | None:
    if not venv:
        venv = str(BENCH / "results" / "litellm-venv")
    executable = Path(venv) / "bin" / "litellm"
    return executable if executable.exists() else None


def step(load: Load, target: Target, model: str, stream: bool, rate: float, quick: bool) -> dict:
    """One window of `rate` requests a second against `target`."""
    seconds = 1.0 if quick else min(4.0, max(1.5, 300 / rate))
    warmup = 0.5
    pid = target.process.pid if target.process is not None else None
    before = cpu_seconds(pid) if pid else 0.0
    answer = load.run(
        {
            "port": target.port,
            "model": model,
            "stream": stream,
            "rate": rate,
            "seconds": seconds,
            "warmup": warmup,
            "timeout": 10.0,
        }
    )
    if pid:
        sent = int(rate * (warmup + seconds))  # the warm-up's requests cost CPU too
        answer["cpu_per_request"] = (cpu_seconds(pid) - before) / max(sent, 1)
    answer["rate"] = rate
    answer["target"] = target.name
    return answer


def keeps_up(answer: dict[str, Any]) -> bool:
    return (
        not answer["errors"]
        and answer["done"] >= 0.99 * answer["due"]
        and answer["sent_rate"] >= 0.95 * answer["rate"]
        and answer["p99"] < KEEPS_UP_P99
    )


def passes(answer: dict[str, Any], reference: float) -> bool:
    answer["added_p99"] = answer["p99"] - reference
    return keeps_up(answer) and answer["added_p99"] < ADDED_P99_LIMIT


def climb_kind(
    load: Load, direct: Target, targets: list[Target], kind: str, quick: bool, servers: dict
) -> dict[str, Any]:
    model, stream = KINDS[kind]
    climbs = [Climb(t) for t in targets]
    ladder = QUICK_LADDER if quick else LADDER
    load_start = loadavg()
    owed = False
    direct_p99: list[float] = []

    def reference(rate: float) -> float:
        """Direct's p99 at `rate`, or the median of its p99s so far when that is lower: one
        hiccup of the machine in direct's window must not excuse a target's."""
        direct_p99.append(measured(direct, rate)["p99"])
        ordered = sorted(direct_p99)
        return min(direct_p99[-1], ordered[len(ordered) // 2])

    def measured(target: Target, rate: float) -> dict[str, Any]:
        nonlocal owed
        if owed:
            settle(servers)
        answer = step(load, target, model, stream, rate, quick)
        owed = target.name == "litellm"
        return answer

    def judged(climb: Climb, rate: float, direct_now: float) -> dict[str, Any]:
        """A window of `climb`'s target at `rate`; when it misses either mark, one more: a
        single hiccup of a shared machine in a few seconds' window is not a verdict."""
        answer = measured(climb.target, rate)
        climb.steps.append(answer)
        strict_missed = climb.failed is None and not passes(answer, direct_now)
        if strict_missed or not keeps_up(answer):
            answer = measured(climb.target, rate)
            climb.steps.append(answer)
            passes(answer, direct_now)  # sets its added_p99
        return answer

    for rate in ladder:
        climbing = [c for c in climbs if c.stopped is None]
        if not climbing:
            break
        progress(f"rate, {kind}: {rate}/s through {', '.join(c.target.name for c in climbing)}")
        direct_now = reference(rate)
        for climb in climbing:
            answer = judged(climb, rate, direct_now)
            if climb.failed is None:
                if passes(answer, direct_now):
                    climb.passed = answer
                else:
                    climb.failed = answer
            if keeps_up(answer):
                climb.kept_up = answer
            else:
                climb.stopped = answer
    if not quick:
        for climb in climbs:
            low = climb.passed["rate"] if climb.passed else 0
            if climb.failed is None or climb.failed["rate"] - low < max(2, low / 4):
                continue
            middle = (low + climb.failed["rate"]) // 2
            if middle >= 100:
                middle = round(middle, -1)
            direct_now = reference(middle)
            answer = judged(climb, middle, direct_now)
            if passes(answer, direct_now):
                climb.passed = answer
            if keeps_up(answer) and (climb.kept_up is None or middle > climb.kept_up["rate"]):
                climb.kept_up = answer
    return {
        "load_start": load_start,
        "load_end": loadavg(),
        "targets": {
            c.target.name: {
                "sustained": c.passed["rate"] if c.passed else 0,
                "at_sustained": c.passed,
                "first_failed": c.failed,
                "kept_up": c.kept_up["rate"] if c.kept_up else 0,
                "at_kept_up": c.kept_up,
                "stopped": c.stopped,
                "steps": c.steps,
            }
            for c in climbs
        },
    }


def run(quick: bool = False, litellm_venv: str = "", with_litellm: bool = True) -> dict[str, Any]:
    result: dict[str, Any] = {"kinds": {}, "problems": []}
    processes: list[subprocess.Popen | None] = []
    with tempfile.TemporaryDirectory(prefix="streamfix-rate-") as tmp:
        work = Path(tmp)
        try:
            fake_port = free_port()
            fake = start(
                [sys.executable, str(BENCH / "perf_fake.py"), "--port", str(fake_port)],
                RESULTS / "logs" / "rate-fake.log",
                cwd=ROOT,
            )
            processes.append(fake)
            direct = Target("direct", fake_port, None, "/health")
            wait_ready(direct, 20)
            upstream = f"http://{HOST}:{fake_port}/v1"
            redis, redis_url = start_redis(work)
            processes.append(redis)
            targets = [
                start_relay(free_port(), fake_port),
                start_streamfix(
                    "do-nothing", free_port(), upstream, {"repairs": {"enabled": False}}, work
                ),
                start_streamfix("streamfix", free_port(), upstream, {}, work),
            ]
            if redis_url:
                one = {"receipts": {"store": redis_url}}
                two = {"server": {"workers": 2}, "receipts": {"store": redis_url}}
                targets.append(start_streamfix("streamfix-redis", free_port(), upstream, one, work))
                targets.append(start_streamfix("streamfix-2w", free_port(), upstream, two, work))
            else:
                result["problems"].append("streamfix-2w: not measured (no redis-server)")
            executable = litellm_executable(litellm_venv) if with_litellm else None
            if not with_litellm:
                result["problems"].append("litellm: not measured (--quick without --litellm-venv)")
            elif executable is not None:
                venv = executable.parent.parent
                targets.append(start_litellm(free_port(), upstream, work, venv, LITELLM_SPEC))
                result["litellm"] = str(venv)
            else:
                result["problems"].append(
                    "litellm: not measured (no bin/litellm in --litellm-venv, "
                    "CAPACITY_LITELLM_VENV or bench/results/litellm-venv)"
                )
            processes += [t.process for t in targets]
            ready = []
            for target in targets:
                try:
                    wait_ready(target, 180 if target.name == "litellm" else 30)
                    ready.append(target)
                except Exception as exc:
                    result["problems"].append(f"{target.name}: {exc}")
            servers = {t.name: t.process.pid for t in ready if t.process is not None}
            servers["fake"] = fake.pid
            load = Load()
            processes.append(load.process)
            for target in [direct, *ready] if not quick else []:  # every path warm first
                for model, stream in KINDS.values():
                    step(load, target, model, stream, 50, True)
            settle(servers)
            for kind in KINDS:
                result["kinds"][kind] = climb_kind(load, direct, ready, kind, quick, servers)
            result["commands"] = {t.name: t.note for t in ready}
        finally:
            for process in reversed(processes):
                stop(process)
    return result


def lines(result: dict[str, Any]) -> list[str]:
    out = [
        "requests a second per target: open loop, rates on a ladder then halfway; "
        "'< 20 ms': the highest rate with p99 added latency under 20 ms (that p99 added, "
        "and the server's CPU per request there); 'kept up': the highest with p99 under "
        f"{KEEPS_UP_P99:g} s and nothing failed",
        f"{'':<13} {'target':<16} {'< 20 ms':>8} {'p99 +ms':>8} {'CPU ms':>7} {'kept up':>8}"
        "  first over 20 ms at",
    ]
    for kind, found in result["kinds"].items():
        for name, figures in found["targets"].items():
            at = figures["at_sustained"] or {}
            cpu = at.get("cpu_per_request")
            failed = figures["first_failed"]
            out.append(
                f"{kind:<13} {name:<16} {int(figures['sustained']):>8,} "
                + (f"{at['added_p99'] * 1000:>8.1f} " if at else f"{'-':>8} ")
                + (f"{cpu * 1000:>7.2f} " if cpu is not None else f"{'-':>7} ")
                + f"{int(figures['kept_up']):>8,}  "
                + (f"{failed['rate']:,}/s ({why(failed)})" if failed else "-")
            )
        rate = _rates(found["targets"])
        notes = [f"load average {found['load_start']:.1f} -> {found['load_end']:.1f}"]
        if rate("streamfix-redis", "sustained") and rate("streamfix-2w", "sustained"):
            ratio = rate("streamfix-2w", "sustained") / rate("streamfix-redis", "sustained")
            notes.append(f"2 workers / 1 (both on Redis) {ratio:.2f}x")
        for key, label in (("sustained", "< 20 ms"), ("kept_up", "kept up")):
            if rate("streamfix", key) and rate("litellm", key):
                ratio = rate("streamfix", key) / rate("litellm", key)
                notes.append(f"streamfix / litellm ({label}) {ratio:.1f}x")
        out.append(f"{'':<13} {kind}: " + "; ".join(notes))
    out += [f"  {p}" for p in result["problems"]]
    out.append(
        "published, not measured here: LiteLLM about 600 req/s per instance, Portkey's Node "
        "gateway about 860, Bifrost (Go) about 1,250 per core."
    )
    return out


def _rates(targets: dict[str, Any]) -> Any:
    def rate(name: str, key: str) -> int:
        return int(targets.get(name, {}).get(key) or 0)

    return rate


def why(answer: dict[str, Any]) -> str:
    if answer["errors"]:
        return f"errors {answer['errors']}"
    if answer["sent_rate"] < 0.95 * answer["rate"]:
        return f"client sent only {answer['sent_rate']:.0f}/s"
    if answer["done"] < 0.99 * answer["due"]:
        return f"{answer['done']} of {answer['due']} done"
    return f"p99 added {answer['added_p99'] * 1000:.0f} ms"
