"""`python bench/perf.py`: the command line, the processes of a run and its phases in order.

A phase is one module of this package with one `phase_*` function; `--phase NAME` runs only
the named ones (repeatable), with only the targets they need. `--against REV` (repeatable)
adds the builds phase (perf/builds.py): this tree against REV in the same run."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf_procs import HOST, free_port, start, stop

from .builds import QUICK_BUILDS, BuildPlan, builds_table, phase_builds
from .config import (
    BENCH,
    CLIENTS,
    LITELLM_SPEC,
    MARKUP_TARGETS,
    MODELS,
    PEERS,
    QUICK,
    RELAY,
    RESULTS,
    ROOT,
    STREAMFIX_CONFIGS,
    Failed,
    Plan,
    progress,
)
from .correctness import correctness
from .cpu import phase_cpu
from .first_argument import first_argument_lines, phase_first_argument
from .growth import phase_growth
from .latency import phase_latency
from .load import LoadGenerator
from .machine import machine
from .markup import phase_markup
from .memory import phase_memory
from .peers import peers_report, phase_peers
from .portkey import PORTKEY, PORTKEY_PACKAGE, installed_versions, start_portkey
from .profile import format_profile, phase_profile
from .report import goals, ratios, report
from .servers import (
    LITELLM_ENV,
    Target,
    clean_env,
    litellm_config,
    litellm_version,
    start_litellm,
    start_relay,
    start_streamfix,
    wait_ready,
)
from .settle import Settler, settle_summary
from .throughput import phase_throughput
from .warmup import phase_warmup

MAIN_PHASES = (
    "correctness",
    "memory",
    "latency",
    "throughput",
    "cpu",
    "growth",
    "markup",
    "first_argument",
)
"""The phases of the full run, in order (correctness runs again after the load)."""
PHASES = (*MAIN_PHASES, "peers", "builds")
"""`peers` and `builds` run only when named (`--phase peers`, `--against REV`)."""
BUILDS_ONLY = frozenset({"builds"})
"""Phases that need neither the do-nothing proxy nor the peers."""
APART = frozenset({"peers", "builds"})
"""Phases with a table of their own instead of the main one."""


def profile_load(text: str) -> tuple[str, int]:
    """`json:1` -> ("json", 1): a stream kind of MODELS (json: non-streamed) and a concurrency."""
    kind, _, concurrency = text.partition(":")
    if kind not in MODELS or not concurrency.isdigit() or int(concurrency) < 1:
        raise argparse.ArgumentTypeError(f"KIND:CONCURRENCY, KIND one of {', '.join(MODELS)}")
    return kind, int(concurrency)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Performance: streamfix against direct, a raw TCP relay, a do-nothing "
        "proxy, LiteLLM and (--against) earlier builds."
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--no-litellm", action="store_true", help="leave LiteLLM out")
    parser.add_argument("--no-portkey", action="store_true", help="leave Portkey's gateway out")
    parser.add_argument(
        "--portkey-dir",
        default=str(RESULTS / "portkey"),
        help=f"where {PORTKEY_PACKAGE} is installed with npm on first use",
    )
    parser.add_argument(
        "--compare-clients",
        action="store_true",
        help="also do-nothing on httpx's upstream client (about a minute more)",
    )
    parser.add_argument("--litellm-spec", default=LITELLM_SPEC, help="pip spec when installing")
    parser.add_argument(
        "--litellm-venv", default=str(RESULTS / "litellm-venv"), help="LiteLLM's own venv"
    )
    parser.add_argument(
        "--profile", type=float, default=0, metavar="SECONDS", help="py-spy streamfix afterwards"
    )
    parser.add_argument(
        "--profile-load",
        action="append",
        type=profile_load,
        metavar="KIND:CONCURRENCY",
        help="a load to profile under, instead of the plan's (repeatable), e.g. json:1, text:16",
    )
    parser.add_argument("--writes", choices=("yield", "burst"), default="yield", help="fake")
    parser.add_argument("--output", default=str(RESULTS / "perf.json"))
    parser.add_argument(
        "--phase",
        action="append",
        choices=PHASES,
        metavar="NAME",
        help=f"run only this phase (repeatable): {', '.join(PHASES)}",
    )
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="REV",
        help="also compare this tree with the build at git REV, alternating (repeatable)",
    )
    args = parser.parse_args()
    if args.phase is None:
        args.phase = [*MAIN_PHASES, *(["builds"] if args.against else [])]
    return args


def main() -> int:
    args = arguments()
    phases = set(args.phase)
    full = set(MAIN_PHASES) <= phases
    plan = QUICK if args.quick else Plan()
    if args.profile_load:
        plan = dataclasses.replace(plan, profile=tuple(args.profile_load))
    build_plan = QUICK_BUILDS if args.quick else BuildPlan()
    RESULTS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def deadline(signum: int, frame: Any) -> None:
        raise Failed(f"over the {plan.deadline_seconds:.0f} s deadline")

    signal.signal(signal.SIGALRM, deadline)
    profiling = (args.profile + 30) * len(plan.profile) if args.profile else 0
    builds = 240 + 120 * len(args.against) if "builds" in phases else 0
    peers = 300 if "peers" in phases else 0
    signal.alarm(int(plan.deadline_seconds + profiling + builds + peers))

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminated)

    results: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "phases": [p for p in PHASES if p in phases],
        "writes": args.writes,
        "machine": machine(),
        "plan": {k: v for k, v in plan.__dict__.items()},
        "problems": [],
    }
    processes: list[subprocess.Popen] = []
    work = Path(tempfile.mkdtemp(prefix="streamfix-perf-"))
    status = 0
    try:
        if "first_argument" in phases:  # its own upstream and servers: before the others start
            results["first_argument"] = phase_first_argument(work)
            print("\n".join(first_argument_lines(results["first_argument"])))
            if phases == {"first_argument"}:
                return status
        fake_port = free_port()
        fake = start(
            [
                sys.executable,
                str(BENCH / "perf_fake.py"),
                "--port",
                str(fake_port),
                "--writes",
                args.writes,
            ],
            RESULTS / "logs" / "fake.log",
            env=clean_env(),
            cwd=ROOT,
        )
        processes.append(fake)
        upstream = f"http://{HOST}:{fake_port}/v1"
        targets = [Target("direct", fake_port, fake, "/health")]
        targets[0].process = None  # direct: no server of its own to measure
        direct_health = Target("fake", fake_port, fake, "/health")
        builds_only = phases <= BUILDS_ONLY
        candidates = [start_relay(free_port(), fake_port)]
        candidates += [
            start_streamfix(name, free_port(), upstream, config, work)
            for name, config in STREAMFIX_CONFIGS.items()
            if (name != CLIENTS[1] or args.compare_clients)
            and (name == "streamfix" or not builds_only)
        ]
        markup_pair = (
            [
                start_streamfix(name, free_port(), upstream, config, work)
                for name, config in MARKUP_TARGETS.items()
            ]
            if "markup" in phases
            else []
        )
        processes += [t.process for t in markup_pair if t.process is not None]
        with_peers = not builds_only and phases - {"markup", "builds"}
        if with_peers and not args.no_litellm:
            venv = Path(args.litellm_venv).resolve()
            candidates.append(start_litellm(free_port(), upstream, work, venv, args.litellm_spec))
        portkey_dir = Path(args.portkey_dir).resolve()
        if with_peers and not args.no_portkey:
            candidates.append(start_portkey(free_port(), fake_port, portkey_dir))
        processes += [t.process for t in candidates if t.process is not None]
        wait_ready(direct_health, 20)
        absent: dict[str, str] = {}
        results["absent"] = absent
        for target in candidates:
            if target.error:
                results["problems"].append(f"{target.name}: {target.error}")
                absent[target.name] = target.error
                continue
            try:
                wait_ready(target, {"litellm": 180, PORTKEY: 60}.get(target.name, 30))
            except Failed as exc:
                log = RESULTS / "logs" / f"{target.name}.log"
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                target.error = f"did not start: {exc}; log tail: {' | '.join(tail)}"
                results["problems"].append(f"{target.name}: {target.error}")
                if target.name in PEERS:
                    absent[target.name] = target.error
                stop(target.process)
                continue
            targets.append(target)
        ready_pair = []
        for target in markup_pair:
            try:
                wait_ready(target, 30)
                ready_pair.append(target)
            except Failed as exc:
                results["problems"].append(f"{target.name}: {exc} (recogniser phase not run)")
        needed = {RELAY, "streamfix"} | (set() if builds_only else {"do-nothing"})
        missing = needed - {t.name for t in targets}
        if missing:
            raise Failed(f"could not start {', '.join(sorted(missing))}")
        if any(t.name == "litellm" for t in targets):
            results["litellm_version"] = litellm_version(venv)
        if any(t.name == PORTKEY for t in targets):
            results["portkey_versions"] = installed_versions(portkey_dir)
        results["peer_versions"] = peer_versions(results)
        results["targets"] = {
            t.name: {"port": t.port, "pid": t.pid, "command": t.note, "headers": t.headers}
            for t in targets
        }
        results["targets"]["direct"]["fake_pid"] = fake.pid
        if any(t.name == "litellm" for t in targets):
            results["litellm_settings"] = {
                "env": LITELLM_ENV,
                "config": litellm_config(upstream),
                "uvicorn_log_level": "WARNING",
            }
        names = [t.name for t in targets]
        progress(f"targets up: {', '.join(names)} (fake on {fake_port})")

        load = LoadGenerator()
        processes.append(load.process)
        for target in targets:
            if target.headers:
                load.run({"job": "route", "port": target.port, "headers": target.headers}, 30)
        servers = {t.name: t.pid for t in [*targets, *ready_pair] if t.pid is not None}
        settler = Settler({**servers, "fake": fake.pid})
        results["settle"] = settler.record()
        sections: list[str] = []
        if phases & (set(MAIN_PHASES) | {"peers"}) - {"markup"}:
            results["correctness"] = [correctness(load, targets, "before the load")]
            phase_warmup(load, targets)
        if "memory" in phases:
            results["memory"] = phase_memory(load, targets, plan, fake_port, settler)
        if "latency" in phases:
            results["latency"] = phase_latency(load, targets, plan, settler)
        if "throughput" in phases:
            results["throughput"] = phase_throughput(load, targets, plan, fake.pid, settler)
        if "cpu" in phases:
            results["cpu"] = phase_cpu(load, targets, plan, fake.pid, settler)
        if "growth" in phases:
            results["growth"] = phase_growth(load, targets, plan, settler)
        if "peers" in phases:
            results["peers"] = phase_peers(load, targets, plan, fake.pid, settler)
        if len(ready_pair) == len(MARKUP_TARGETS):
            phase_warmup(load, ready_pair)
            results["markup"] = phase_markup(load, targets[0], ready_pair, plan, fake.pid, settler)
            results["targets"].update(
                {t.name: {"port": t.port, "pid": t.pid, "command": t.note} for t in ready_pair}
            )
        if "builds" in phases:
            base = [t for t in targets if t.name in ("direct", RELAY, "streamfix")]
            results["builds"] = phase_builds(
                load, base, args.against, upstream, fake.pid, build_plan, start, stop, free_port
            )
        if "correctness" in results:
            results["correctness"].append(correctness(load, targets, "after the load"))
        for check in results.get("correctness", []):
            problems = [p for kind in check["targets"]["streamfix"].values() for p in kind]
            if problems:
                status = 1
                results["problems"].append(
                    f"streamfix output failed the checks {check['when']}: {problems[:3]}"
                )
        recogniser = (results.get("markup") or {}).get("problems") or []
        if recogniser:
            status = 1
            results["problems"].append(f"the recogniser changed plain text: {recogniser[:3]}")
        results["seconds"] = time.monotonic() - began
        results["machine"]["loadavg_end"] = os.getloadavg()
        if phases - APART:
            results["ratios"] = ratios(results)
            results["goals"] = goals(results)
            sections.append(report(results, names) if full else partial_report(results, names))
        if "peers" in results:
            sections.append(peers_report(results))
        if "builds" in results:
            sections.append(builds_report(results))
        if args.profile > 0:
            streamfix = next(t for t in targets if t.name == "streamfix")
            results["profile"] = phase_profile(
                load, streamfix, plan, args.profile, fake.pid, settler
            )
            sections.append(format_profile(results["profile"]))
        sections.append(settle_summary(results["settle"]))
        text = "\n\n".join(sections)
        print(text)
        results["table"] = text
    except (Failed, KeyboardInterrupt, subprocess.CalledProcessError) as exc:
        status = 2
        results["problems"].append(f"run aborted: {type(exc).__name__}: {exc}")
        print(f"perf: aborted: {exc}", file=sys.stderr)
    finally:
        signal.alarm(0)
        for process in reversed(processes):
            stop(process)
        shutil.rmtree(work, ignore_errors=True)
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=1, default=str))
        print(f"\nwrote {output}", file=sys.stderr)
    return status


def peer_versions(results: dict[str, Any]) -> str:
    """`litellm 1.108.7; portkey 1.15.2 (@hono/node-server 1.19.19, node v24.19.0)`."""
    found = [f"litellm {results.get('litellm_version') or 'not run'}"]
    portkey = results.get("portkey_versions")
    if portkey:
        found.append(
            f"portkey {portkey[PORTKEY_PACKAGE]} (@hono/node-server "
            f"{portkey['@hono/node-server']}, node {portkey['node']})"
        )
    else:
        found.append("portkey not run")
    return "; ".join(found)


def partial_report(results: dict[str, Any], names: list[str]) -> str:
    """The full report's table and notes, for the phases that ran (the others' rows say -)."""
    return f"phases: {', '.join(results['phases'])}\n" + report(results, names)


def builds_report(results: dict[str, Any]) -> str:
    found = results["builds"]
    m = results["machine"]
    return "\n".join(
        [
            f"builds, alternating in one run (this tree: {m['streamfix']}; machine: "
            f"{m['cores']} cores, load average {m['loadavg_start'][0]:.2f} at start, "
            f"{m['loadavg_end'][0]:.2f} at end)",
            "",
            builds_table(found),
            "",
            "added = the target's time to the last byte less direct's, in the same interleaved "
            "run; the relay is the floor (one more loopback hop and process, no HTTP parsing).",
            "fraction of direct: median over rounds of the target's events/s over direct's in "
            "the same round.",
        ]
    )
