"""The peers phase (`--phase peers`): streamfix beside other projects' proxies (LiteLLM, Portkey's
gateway), the do-nothing proxy and the raw TCP relay, on the same fake upstream, in one short run.

1. Non-streamed added latency: `peers_requests` requests per target at concurrency 1 after
   `peers_warmup`, one keep-alive connection each, every target in a block of its own with
   direct, the two alternating request by request: between two of a target's requests runs one
   direct request, the same for every target, so no target's figures carry what another's
   process does to the caches (a Node process interleaved with the others doubled their added
   latency) or leaves behind (LiteLLM's logging). Figures: the target's time to the last byte
   less that of its block's direct, median and p90, and the median over the relay's.
2. Streamed text (50 events) at concurrency `peers_concurrency` as a share of direct:
   `peers_rounds` windows of `peers_window` seconds per target, the targets taking turns and
   who goes first rotating each round; each window divided by direct's window of the same
   round, the median of those shares. A window after LiteLLM's waits for the servers to settle.
3. RSS of each server's process tree after the warm-up and after the throughput rounds.
"""

from __future__ import annotations

import statistics
from typing import Any

from perf_procs import rss_bytes

from .config import BASELINE, EVENTS, MODELS, RELAY, Plan, progress
from .figures import format_table, ms
from .load import LoadGenerator
from .servers import Target
from .settle import Settler, pids


def peers_latency(
    load: LoadGenerator, targets: list[Target], plan: Plan, settler: Settler
) -> dict[str, Any]:
    """Each target's non-streamed figures, with the direct samples of its own block."""
    out: dict[str, Any] = {}
    baseline = [t for t in targets if t.name == BASELINE]
    blocks = [[*baseline, t] for t in targets if t.name != BASELINE]
    for number, members in enumerate(blocks, 1):
        names = [t.name for t in members]
        progress(f"peers: {plan.peers_requests} non-streamed requests each, {', '.join(names)}")
        settler.before(names, f"peers latency block {number}")
        job = {
            "job": "latency",
            "targets": {t.name: t.port for t in members},
            "pids": {t.name: t.pid for t in members if t.pid is not None},
            "kinds": [["json", MODELS["json"], False]],
            "warmup": plan.peers_warmup,
            "requests": plan.peers_requests,
            "timeout": 30,
        }
        budget = 60 + (plan.peers_requests + plan.peers_warmup) * len(members) * 0.5
        found = load.run(job, budget)["json"]
        for name in names:
            if name == BASELINE and BASELINE in out:
                continue  # direct's own figures: those of its first block
            out[name] = {**found[name], "block": number, "direct_ttlb": found[BASELINE]["ttlb"]}
    return out


def peers_throughput(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake: int, settler: Settler
) -> dict[str, Any]:
    """Text streams in windows, the targets taking turns, who goes first rotating."""
    concurrency = plan.peers_concurrency
    progress(f"peers: streamed text at c={concurrency}, {plan.peers_rounds} rounds")
    rates: dict[str, list[float]] = {t.name: [] for t in targets}
    errors = dict.fromkeys(rates, 0)
    cpu = dict.fromkeys(rates, 0.0)
    for number in range(plan.peers_rounds):
        turn = targets[number % len(targets) :] + targets[: number % len(targets)]
        for target in turn:
            settler.before([target.name], f"peers throughput, round {number + 1}: {target.name}")
            job = {
                "job": "load",
                "port": target.port,
                "model": MODELS["text"],
                "concurrency": concurrency,
                "seconds": plan.peers_window,
                "warmup": 0.3,
                "timeout": 60,
                "pids": pids(target, fake),
            }
            found = load.run(job, plan.peers_window + 120)
            rates[target.name].append(found["requests"] / found["seconds"] * EVENTS)
            errors[target.name] += found["errors"] + found["incomplete"]
            cpu[target.name] += found["cpu"].get("server", 0.0)
    direct = rates[BASELINE]
    return {
        name: {
            "concurrency": concurrency,
            "events_per_s_by_round": values,
            "events_per_s": max(values),
            "of_direct": statistics.median(v / d for v, d in zip(values, direct, strict=True)),
            "errors": errors[name],
            "server_cpu_per_10k_events": (
                cpu[name] * 10_000 / (sum(values) * plan.peers_window) if any(values) else None
            ),
        }
        for name, values in rates.items()
    }


def phase_peers(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake: int, settler: Settler
) -> dict[str, Any]:
    servers = {t.name: t.pid for t in targets if t.pid is not None}
    rss_before = {name: rss_bytes(pid) for name, pid in servers.items()}
    latency = peers_latency(load, targets, plan, settler)
    throughput = peers_throughput(load, targets, plan, fake, settler)
    rss_after = {name: rss_bytes(pid) for name, pid in servers.items()}
    return {
        "targets": [t.name for t in targets],
        "latency": latency,
        "throughput": throughput,
        "rss": {name: {"warm": rss_before[name], "after": rss_after[name]} for name in servers},
    }


def peers_table(found: dict[str, Any], absent: dict[str, str]) -> str:
    """A column per target (direct's own figures in brackets) and per peer not measured."""
    lat, through, rss = found["latency"], found["throughput"], found["rss"]
    names = [n for n in found["targets"] if n != BASELINE]
    base = lat[BASELINE]["ttlb"]

    def added(name: str, q: str) -> float:
        return float(lat[name]["ttlb"][q] - lat[name]["direct_ttlb"][q])

    floor = added(RELAY, "median") if RELAY in lat else 0.0
    concurrency = through[BASELINE]["concurrency"]
    rounds = len(through[BASELINE]["events_per_s_by_round"])
    rows = [
        [
            f"non-streamed, {base['n']} sequential: added ms, median / p90",
            f"[{ms(base['median'])} / {ms(base['p90'])}]",
            *(f"{ms(added(n, 'median'))} / {ms(added(n, 'p90'))}" for n in names),
        ],
        [
            "  x the relay's added latency, median",
            "",
            *(f"{added(n, 'median') / floor:.1f}x" if floor > 0 else "-" for n in names),
        ],
        [
            "  server CPU per request, ms",
            "",
            *(ms(lat[n].get("server_cpu_per_request")) for n in names),
        ],
        [
            f"streamed text, c={concurrency}: events/s (best), share of direct (median of "
            f"{rounds})",
            f"{through[BASELINE]['events_per_s']:,.0f}",
            *(
                f"{through[n]['events_per_s']:,.0f}, {through[n]['of_direct']:.2f}"
                + (" !" if through[n]["errors"] else "")
                for n in names
            ),
        ],
        [
            "  server CPU-s per 10k events",
            "",
            *(
                "-"
                if through[n]["server_cpu_per_10k_events"] is None
                else f"{through[n]['server_cpu_per_10k_events']:.2f}"
                for n in names
            ),
        ],
        [
            "RSS, MiB: after warm-up / after the load",
            "",
            *(f"{rss[n]['warm'] / 2**20:.1f} / {rss[n]['after'] / 2**20:.1f}" for n in names),
        ],
        [
            "failed requests",
            str(lat[BASELINE]["errors"] + through[BASELINE]["errors"]),
            *(str(lat[n]["errors"] + through[n]["errors"]) for n in names),
        ],
    ]
    for row in rows:
        row += ["-"] * len(absent)
    header = ["metric", BASELINE, *names, *(f"{n} (not measured)" for n in absent)]
    return format_table(rows, header)


def peers_report(results: dict[str, Any]) -> str:
    m = results["machine"]
    absent = results.get("absent", {})
    lines = [
        f"peers, one run (streamfix: {m['streamfix']}; {results.get('peer_versions', '')}; "
        f"machine: {m['cores']} cores, load average {m['loadavg_start'][0]:.2f} at start, "
        f"{m['loadavg_end'][0]:.2f} at end)",
        "",
        peers_table(results["peers"], absent),
        "",
        "added = the target's time to the last byte less direct's, each target alternating with "
        "direct in a block of its own (direct's column: its first block); the relay is the floor.",
        "share of direct: the median over rounds of the target's events/s over direct's in the "
        "same round. ! = some requests failed (perf.json).",
        *(f"{name}: not measured: {why}" for name, why in absent.items()),
    ]
    return "\n".join(lines)
