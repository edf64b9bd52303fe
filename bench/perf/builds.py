"""Builds compared in one run (`--against REV`): this tree's proxy against earlier commits.

Each REV is checked out into a temporary `git worktree` (removed afterwards) and its proxy
started from there (`python -m proxy serve`, cwd = the worktree, so that build's own `proxy/`
package is imported; same interpreter and venv), next to this tree's proxy, the raw TCP relay
and direct-to-fake. All of them run the default configuration, the flags every build since
4c4a637 understands (`--upstream --host --port --log-level`) and no config file.

Why one run, alternating: on a shared 2-core machine the noise between two runs is larger
than the difference between two builds. So the non-streamed latency samples interleave the
targets request by request (the load generator's `latency` job), and the streamed throughput
windows take turns round by round, who goes first rotating, each round's figure divided by
the direct window of the same round.

Figures: (a) added latency over direct, median and p90 of `requests` sequential
non-streamed requests, and its ratio to the relay's added latency; (b) streamed throughput
(text, 50 events) at concurrency 1 and 50 as a fraction of direct: the median over rounds of
target / direct.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import BASELINE, EVENTS, MODELS, RELAY, RESULTS, ROOT, Failed, progress
from .figures import format_table, ms
from .load import LoadGenerator
from .servers import Target, clean_env, wait_ready
from .settle import pids

THIS_TREE = "streamfix"
"""The column of the tree perf.py runs from (the full run's streamfix target)."""


@dataclass(frozen=True)
class BuildPlan:
    requests: int = 500
    warmup: int = 50
    rounds: int = 6
    window: float = 1.5
    concurrency: tuple[int, ...] = (1, 50)


QUICK_BUILDS = BuildPlan(requests=150, warmup=20, rounds=3, window=1.0)


def revision(rev: str) -> str:
    """`rev` as a short commit hash (raises Failed when git does not know it)."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if found.returncode != 0:
        raise Failed(f"--against {rev}: {found.stderr.strip() or 'unknown revision'}")
    return found.stdout.strip()


@contextmanager
def checkouts(revs: list[str]) -> Iterator[dict[str, Path]]:
    """A detached worktree per rev (label -> directory), all removed on the way out."""
    parent = Path(tempfile.mkdtemp(prefix="streamfix-builds-"))
    made: dict[str, Path] = {}
    try:
        for rev in revs:
            directory = parent / revision(rev)
            if rev in made or directory in made.values():
                continue
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(directory), rev],
                capture_output=True,
                check=True,
                timeout=120,
            )
            made[rev] = directory
        yield made
    finally:
        for directory in made.values():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(directory)],
                capture_output=True,
                timeout=120,
            )
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)


def start_build(name: str, directory: Path, port: int, upstream: str, start: Any) -> Target:
    """That build's `python -m proxy serve`, run from its own checkout, default config."""
    command = [sys.executable, "-m", "proxy", "serve", "--upstream", upstream]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    log = RESULTS / "logs" / f"build-{name}.log"
    process = start(command, log, env=clean_env(), cwd=directory)
    return Target(name, port, process, "/healthz", f"{' '.join(command[1:])} (in {name})")


def ready(targets: list[Target]) -> None:
    for target in targets:
        try:
            wait_ready(target, 30)
        except Failed as exc:
            log = RESULTS / "logs" / f"build-{target.name}.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise Failed(f"{target.name}: {exc}; log tail: {' | '.join(tail)}") from exc


def latency(load: LoadGenerator, targets: list[Target], plan: BuildPlan) -> dict[str, Any]:
    """Non-streamed requests at concurrency 1, every target in turn request by request."""
    progress(f"builds: {plan.requests} non-streamed requests per target, interleaved")
    job = {
        "job": "latency",
        "targets": {t.name: t.port for t in targets},
        "pids": {t.name: t.pid for t in targets if t.pid is not None},
        "kinds": [["json", MODELS["json"], False]],
        "warmup": plan.warmup,
        "requests": plan.requests,
        "timeout": 30,
    }
    budget = 60 + (plan.requests + plan.warmup) * len(targets) * 0.5
    return load.run(job, budget)["json"]


def throughput(
    load: LoadGenerator, targets: list[Target], plan: BuildPlan, fake: int
) -> dict[str, Any]:
    """Text streams in short windows, targets taking turns and rotating who goes first."""
    out: dict[str, Any] = {}
    for concurrency in plan.concurrency:
        progress(f"builds: streamed throughput at c={concurrency}, {plan.rounds} rounds")
        rates: dict[str, list[float]] = {t.name: [] for t in targets}
        errors: dict[str, int] = dict.fromkeys(rates, 0)
        for number in range(plan.rounds):
            turn = targets[number % len(targets) :] + targets[: number % len(targets)]
            for target in turn:
                job = {
                    "job": "load",
                    "port": target.port,
                    "model": MODELS["text"],
                    "concurrency": concurrency,
                    "seconds": plan.window,
                    "warmup": 0.3,
                    "timeout": 60,
                    "pids": pids(target, fake),
                }
                found = load.run(job, plan.window + 120)
                rates[target.name].append(found["requests"] / found["seconds"] * EVENTS)
                errors[target.name] += found["errors"] + found["incomplete"]
        direct = rates[BASELINE]
        out[str(concurrency)] = {
            name: {
                "events_per_s_by_round": values,
                "events_per_s": max(values),
                "of_direct": statistics.median(v / d for v, d in zip(values, direct, strict=True)),
                "errors": errors[name],
            }
            for name, values in rates.items()
        }
    return out


def phase_builds(
    load: LoadGenerator,
    base: list[Target],
    revs: list[str],
    upstream: str,
    fake: int,
    plan: BuildPlan,
    start: Any,
    stop: Any,
    free_port: Any,
) -> dict[str, Any]:
    """`base` holds direct, the relay and this tree's proxy; each rev adds a column."""
    started: list[Target] = []
    with checkouts(revs) as directories:
        try:
            for rev, directory in directories.items():
                progress(f"builds: starting {rev} ({revision(rev)}) from {directory}")
                started.append(start_build(rev, directory, free_port(), upstream, start))
            ready(started)
            targets = [*base, *started]
            warm(load, targets)
            return {
                "revisions": {rev: revision(rev) for rev in directories},
                "this_tree": THIS_TREE,
                "plan": plan.__dict__,
                "latency": latency(load, targets, plan),
                "throughput": throughput(load, targets, plan, fake),
                "targets": {t.name: t.note for t in started},
            }
        finally:
            for target in started:
                stop(target.process)


def warm(load: LoadGenerator, targets: list[Target]) -> None:
    """Every target through each kind of exchange before anything counts."""
    models = [["perf-json", False], [MODELS["text"], True]]
    for target in targets:
        job = {
            "job": "sequential",
            "port": target.port,
            "pid": target.pid or 1,
            "models": models,
            "count": 100,
            "max_seconds": 20,
            "timeout": 30,
        }
        load.run(job, 120)


def builds_table(found: dict[str, Any]) -> str:
    """One column per build and the relay; direct's own figures in the first column."""
    lat = found["latency"]
    revs = found["revisions"]
    names = [THIS_TREE, *revs, RELAY]
    header = [
        "metric",
        "direct",
        *(f"{n} ({revs[n]})" if n in revs else "this tree" if n == THIS_TREE else n for n in names),
    ]
    base = lat[BASELINE]["ttlb"]
    relay = lat[RELAY]["ttlb"]

    def add(name: str, q: str) -> float:
        return float(lat[name]["ttlb"][q] - base[q])

    rows: list[list[str]] = [
        [
            f"non-streamed, {base['n']} sequential: added ms, median / p90",
            f"[{ms(base['median'])} / {ms(base['p90'])}]",
            *(f"{ms(add(n, 'median'))} / {ms(add(n, 'p90'))}" for n in names),
        ],
        [
            "  x the relay's added latency, median / p90",
            "",
            *(
                f"{add(n, 'median') / add(RELAY, 'median'):.1f}x / "
                f"{add(n, 'p90') / add(RELAY, 'p90'):.1f}x"
                if relay["median"] > base["median"] and relay["p90"] > base["p90"]
                else "-"
                for n in names
            ),
        ],
        [
            "  server CPU per request, ms",
            "",
            *(
                ms(lat[n]["server_cpu_per_request"])
                if lat[n].get("server_cpu_per_request") is not None
                else "-"
                for n in names
            ),
        ],
    ]
    for concurrency, per_target in found["throughput"].items():
        rows.append(
            [
                f"streamed text, c={concurrency}: events/s (best), fraction of direct (median)",
                f"{per_target[BASELINE]['events_per_s']:,.0f}",
                *(
                    f"{per_target[n]['events_per_s']:,.0f}, {per_target[n]['of_direct']:.2f}"
                    + (" !" if per_target[n]["errors"] else "")
                    for n in names
                ),
            ]
        )
    errors = {n: lat[n]["errors"] for n in names}
    rows.append(["failed requests", str(lat[BASELINE]["errors"]), *(str(errors[n]) for n in names)])
    return format_table(rows, header)
