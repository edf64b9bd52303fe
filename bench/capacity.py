"""Capacity of one proxy worker: how many slow streams it holds, and how many requests a second
it sustains (issue 31, item 4).

    python bench/capacity.py --phase streams   # 1k, 5k, 10k streams, gradual and at once (~7 min)
    python bench/capacity.py --phase streams --streams 10000 --open gradual --compare
    python bench/capacity.py --phase objects   # what one open stream keeps alive (~30 s)
    python bench/capacity.py --phase rate      # requests/s under 20 ms added p99 (~5 min)
    python bench/capacity.py --quick           # every phase, small: under a minute

Phases (each in its own module of bench/capacity/):

- `streams` (open_streams.py): per case, a fresh upstream (capacity/clock_upstream.py: a stream
  of `--events` chunks, one a second, each stamped with the monotonic time of its write) and a
  fresh `streamfix serve` (default configuration, `server.max_connections` raised to fit);
  client processes (capacity/stream_clients.py, raw asyncio, 5,000 streams each) open N streams
  at `--rate` a second or all at once. Printed: errors, the proxy's idle and peak RSS and their
  difference per stream, its CPU seconds, the lag from the upstream's write to the client's read
  (p50/p99/max, and p99 once every stream is open), the heads' times, and the proxy's full
  collections (a bench-only probe, capacity/probe/sitecustomize.py, on the proxy's PYTHONPATH:
  the proxy's code knows nothing of it). `--compare` adds the same proxy with
  `server.gc_freeze = false` to every case; `--direct` the client straight to the upstream.
- `objects` (kept_alive.py): tracemalloc and the collector's objects by type, before and with N
  streams open: what each open stream allocates and keeps alive.
- `rate` (rate.py): open-loop load at rising rates; the highest rate each target sustains with
  p99 added latency under 20 ms, non-streamed and streamed.

Everything listens on 127.0.0.1; every process is in its own process group with a parent-death
signal and is stopped in `finally`; every case ends by itself (its clients have a deadline).
Writes bench/results/capacity.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity import kept_alive, open_streams, rate, report
from capacity.open_streams import DESCRIPTORS_AT_REST, Case, Variant
from capacity.processes import PINS, RESULTS, progress
from perf.machine import machine

PHASES = ("streams", "objects", "rate")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--phase", action="append", choices=PHASES, help="repeatable; default all")
    parser.add_argument("--quick", action="store_true", help="small figures, under a minute")
    parser.add_argument("--streams", action="append", type=int, help="repeatable (1k, 5k, 10k)")
    parser.add_argument("--open", choices=("gradual", "once", "both"), default="both")
    parser.add_argument("--rate", type=float, help="streams opened a second when gradual")
    parser.add_argument("--events", type=int, default=30, help="events per stream, 1 a second")
    parser.add_argument("--compare", action="store_true", help="also server.gc_freeze = false")
    parser.add_argument("--direct", action="store_true", help="also the client to the upstream")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="also a proxy with these settings, e.g. do-nothing:repairs.enabled=false",
    )
    parser.add_argument("--objects-streams", type=int, default=1000)
    parser.add_argument(
        "--pin",
        choices=("on", "off"),
        default="off",
        help="the proxy on CPU 0, the upstream and clients on CPU 1 (with 2 or more CPUs)",
    )
    parser.add_argument("--litellm-venv", default=os.environ.get("CAPACITY_LITELLM_VENV", ""))
    parser.add_argument("--output", default=str(RESULTS.parent / "capacity.json"))
    return parser.parse_args()


def most_streams() -> int:
    """What one proxy process can hold here: a client and an upstream socket per stream."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return (hard - DESCRIPTORS_AT_REST) // 2 if hard != resource.RLIM_INFINITY else 10**6


def stream_cases(args: argparse.Namespace) -> tuple[list[Case], list[str]]:
    notes = []
    counts = args.streams or ([200] if args.quick else [1000, 5000, 10000])
    events = 5 if args.quick and args.events == 30 else args.events
    cases = []
    for wanted in counts:
        streams = min(wanted, most_streams())
        if streams < wanted:
            notes.append(
                f"{wanted:,} streams need {2 * wanted + DESCRIPTORS_AT_REST:,} open files in the "
                f"proxy (a client and an upstream socket each); this machine's hard limit is "
                f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,}, so {streams:,} were opened"
            )
        rate = args.rate or (100.0 if streams <= 1000 else 500.0)
        if args.open in ("gradual", "both"):
            cases.append(Case(streams, rate, events))
        if args.open in ("once", "both"):
            cases.append(Case(streams, 0.0, events))
    return cases, notes


def parse_variant(text: str) -> Variant:
    """`name:section.key=value,...` (values read as JSON when they parse, else as text)."""
    name, _, assignments = text.partition(":")
    config: dict[str, dict[str, object]] = {}
    for assignment in filter(None, assignments.split(",")):
        key, _, raw = assignment.partition("=")
        section, _, field = key.strip().partition(".")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        config.setdefault(section, {})[field] = value
    return Variant(name, config, {})


def streams_phase(args: argparse.Namespace, results: dict) -> list[str]:
    cases, notes = stream_cases(args)
    variants = [Variant("streamfix", {}, {})]
    if args.compare:
        variants.append(Variant("gc-as-it-comes", {"server": {"gc_freeze": False}}, {}))
    variants += [parse_variant(v) for v in args.variant]
    found = open_streams.run(cases, variants, args.direct)
    results["streams"] = found
    lines = ["open streams through one worker", *report.streams_table(found)]
    lines += [*report.streams_notes(), *notes, "targets (streamfix):"]
    return lines + report.streams_goals(found)


def objects_phase(args: argparse.Namespace, results: dict) -> list[str]:
    found = kept_alive.run(100 if args.quick else args.objects_streams)
    results["objects"] = found
    return kept_alive.lines(found)


def rate_phase(args: argparse.Namespace, results: dict) -> list[str]:
    found = rate.run(
        quick=args.quick,
        litellm_venv=args.litellm_venv,
        with_litellm=not args.quick or bool(args.litellm_venv),
    )
    results["rate"] = found
    return rate.lines(found)


PHASE_RUNNERS = {"streams": streams_phase, "objects": objects_phase, "rate": rate_phase}


def main() -> int:
    args = arguments()
    phases = args.phase or list(PHASES)
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin == "on" and len(cpus) >= 2:
        PINS["proxy"], PINS["others"] = {cpus[0]}, set(cpus[1:])
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict = {"machine": machine(), "argv": sys.argv[1:], "pins": str(PINS)}
    began = time.monotonic()
    lines: list[str] = []
    status = 0
    for phase in (p for p in PHASES if p in phases):
        try:
            lines += ["", *PHASE_RUNNERS[phase](args, results)]
        except Exception as exc:  # the other phases still run; the figures so far are kept
            status = 2
            results.setdefault("problems", []).append(f"{phase}: {type(exc).__name__}: {exc}")
            lines += ["", f"{phase}: aborted: {type(exc).__name__}: {exc}"]
            traceback.print_exc()
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["seconds"] = time.monotonic() - began
    m = results["machine"]
    print(
        f"streamfix {m['streamfix']}; {m['cores']} cores ({m['cpu_model']}), Python "
        f"{m['python']}; load average {m['loadavg_start'][0]:.2f} at start, "
        f"{m['loadavg_end'][0]:.2f} at end; {results['seconds']:.0f} s"
    )
    print("\n".join(lines))
    Path(args.output).write_text(json.dumps(results, indent=1, default=str))
    progress(f"wrote {args.output}")
    return status


if __name__ == "__main__":
    sys.exit(main())
