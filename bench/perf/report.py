"""The report: the table of every phase's figures, the ratios under it, and the issue's goals."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .config import BASELINE, CLIENTS, COLUMNS, EVENTS, KIND_LABELS, PEERS, RELAY, SHORT, MiB
from .figures import format_table, ms, ratio
from .markup import markup_goals, markup_lines


def latency_block(lat: dict, name: str) -> dict | None:
    """The latency block `name` was measured in; the baseline's first is block 1."""
    return next((b for b in lat.get("blocks", ()) if name in b["targets"]), None)


def latency_of(lat: dict, kind: str, name: str) -> dict | None:
    block = latency_block(lat, name)
    return block["kinds"].get(kind, {}).get(name) if block else None


def added(lat: dict, kind: str, measure: str, name: str) -> tuple[float, float] | None:
    """`name`'s median and p99 less those of the baseline samples of its own block."""
    block = latency_block(lat, name)
    try:
        per_target = block["kinds"][kind]  # type: ignore[index]
        mine, base = per_target[name][measure], per_target[BASELINE][measure]
        return mine["median"] - base["median"], mine["p99"] - base["p99"]
    except (KeyError, TypeError):
        return None


def memory_rows(
    memory: dict[str, Any], growth: dict[str, Any], names: list[str]
) -> list[list[str]]:
    """Idle and held RSS, the cost per open stream, and growth: a row each."""
    rows: list[list[str]] = []
    streams = max((m.get("opened", 0) for m in memory.values()), default=0)
    for label, key in (("  idle, MiB", "idle"), (f"  {streams} open streams, MiB", "held")):
        row = [label]
        for name in names:
            m = memory.get(name)
            row.append(f"{m[key + '_rss'] / MiB:.1f}" if m else "-")
        rows.append(row)
    row = ["  per open stream, KiB"]
    for name in names:
        m = memory.get(name)
        row.append(
            f"{(m['held_rss'] - m['idle_rss']) / max(m['opened'], 1) / 1024:.1f}"
            + ("" if m["opened"] == streams else f" ({m['opened']} open)")
            if m
            else "-"
        )
    rows.append(row)
    row = ["  growth over N sequential exchanges, MiB (N)"]
    for name in names:
        g = growth.get(name)
        if g:
            first, last = g["rss"][0][1], g["rss"][-1][1]
            row.append(f"{(last - first) / MiB:+.1f} ({g['exchanges']:,})")
        else:
            row.append("-")
    rows.append(row)
    return rows


def build_table(results: dict[str, Any], names: list[str]) -> tuple[list[list[str]], list[str]]:
    blank = [""] * len(names)
    rows: list[list[str]] = []
    lat = results.get("latency", {})
    if lat:
        rows.append(["added latency, ms: median / p99 [direct: its own, block 1]", *blank])
    for kind, label in (("json", "non-streamed"), ("short", f"{SHORT}-event stream")):
        for measure, edge in (("ttfb", "first byte"), ("ttlb", "last byte")):
            row = [f"  {label}, {edge}"]
            for name in names:
                if name == BASELINE:
                    base = (latency_of(lat, kind, name) or {}).get(measure)
                    row.append(f"[{ms(base['median'])} / {ms(base['p99'])}]" if base else "-")
                    continue
                pair = added(lat, kind, measure, name)
                row.append(f"{ms(pair[0])} / {ms(pair[1])}" if pair else "-")
            rows.append(row)
    if lat:
        row = ["  server CPU per request, ms: non-streamed / stream"]
        for name in names:
            cpu = [
                (latency_of(lat, k, name) or {}).get("server_cpu_per_request")
                for k in ("json", "short")
            ]
            row.append("-" if None in cpu else f"{ms(cpu[0])} / {ms(cpu[1])}")
        rows.append(row)
    through = results.get("throughput", {})
    if through:
        rows.append(["throughput: events/s / req/s / server CPU-s per 10k events", *blank])
    for kind, levels in through.items():
        for concurrency, per_target in levels.items():
            row = [f"  {KIND_LABELS[kind]}, c={concurrency}"]
            for name in names:
                r = per_target.get(name)
                cpu = r and r.get("server_cpu_per_10k_events")
                row.append(
                    f"{r['events_per_s']:,.0f} / {r['requests_per_s']:,.0f}"
                    + (f" / {cpu:.2f}" if cpu is not None else "")
                    + (" !" if r["errors"] or r["incomplete"] else "")
                    if r
                    else "-"
                )
            rows.append(row)
    cpu = results.get("cpu", {})
    if cpu:
        events = max((r.get("events", 0) for k in cpu.values() for r in k.values()), default=0)
        rows.append([f"server CPU-s per 10k events (fixed load, {events:,} events, c=50)", *blank])
    for kind, per_target in cpu.items():
        row = [f"  {KIND_LABELS[kind]}"]
        for name in names:
            value = server_cpu(per_target, name)
            row.append("-" if value is None else f"{value:.2f}")
        rows.append(row)
    memory = results.get("memory", {})
    growth = results.get("growth", {})
    if memory or growth:
        rows.append(["server memory (RSS of the process tree)", *blank])
        rows += memory_rows(memory, growth, names)
    rows.append(["correctness", *blank])
    checks = results.get("correctness", [])
    if checks:
        row = ["  tool-call stream violations (Gemini / OpenAI)"]
        last = checks[-1]["targets"]
        for name in names:
            c = last.get(name)
            row.append(f"{len(c['gtools'])} / {len(c['otools'])}" if c else "-")
        rows.append(row)
    errors: Counter[str] = Counter()
    for section in (*results.get("throughput", {}).values(), results.get("cpu", {})):
        for per_target in section.values():
            for name, r in per_target.items():
                errors[name] += r["errors"] + r["incomplete"]
    for block in lat.get("blocks", ()):
        for per_target in block["kinds"].values():
            for name, r in per_target.items():
                errors[name] += r["errors"]
    for name, g in growth.items():
        errors[name] += g["errors"]
    rows.append(["  failed requests, all phases", *[str(errors.get(n, 0)) for n in names]])
    absent = results.get("absent", {})
    for row in rows:
        row += ["-"] * len(absent)
    header = ["metric", *(COLUMNS.get(name, name) for name in names)]
    return rows, header + [f"{name} (not measured)" for name in absent]


def server_cpu(per_target: dict[str, Any], name: str) -> float | None:
    return ((per_target.get(name) or {}).get("cpu_per_10k_events") or {}).get("server")


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    lat = results.get("latency", {})
    out: dict[str, Any] = {}
    for peer in PEERS:
        for kind in ("json", "short"):
            for measure in ("ttfb", "ttlb"):
                mine = added(lat, kind, measure, "streamfix")
                theirs = added(lat, kind, measure, peer)
                if mine and theirs:
                    out[f"added {measure} median, {kind}: streamfix / {peer}"] = ratio(
                        mine[0], theirs[0]
                    )
        for kind, per_target in results.get("cpu", {}).items():
            if peer in per_target:
                out[f"CPU per event, {kind}: streamfix / {peer}"] = ratio(
                    server_cpu(per_target, "streamfix"), server_cpu(per_target, peer)
                )
    for kind, levels in results.get("throughput", {}).items():
        level = levels.get("50", {})
        if "streamfix" in level and "do-nothing" in level:
            out[f"throughput c=50, {kind}: streamfix / do-nothing"] = ratio(
                level["streamfix"]["events_per_s"], level["do-nothing"]["events_per_s"]
            )
    return out | relay_ratios(results) | client_ratios(results)


def relay_ratios(results: dict[str, Any]) -> dict[str, str]:
    """streamfix against the floor: its added latency (median) over the relay's, and its
    throughput at c=50 over the relay's. A relay that added nothing measurable (its median at
    or below direct's) gives no ratio."""
    lat = results.get("latency", {})
    out: dict[str, str] = {}
    for kind in ("json", "short"):
        for measure in ("ttfb", "ttlb"):
            mine, floor = added(lat, kind, measure, "streamfix"), added(lat, kind, measure, RELAY)
            if mine and floor:
                out[f"added {measure} median, {kind}: streamfix / {RELAY}"] = (
                    ratio(mine[0], floor[0])
                    if floor[0] > 0
                    else f"- ({RELAY} added {ms(floor[0])} ms, no floor to divide by)"
                )
    for kind, levels in results.get("throughput", {}).items():
        level = levels.get("50", {})
        if "streamfix" in level and RELAY in level:
            out[f"throughput c=50, {kind}: streamfix / {RELAY}"] = ratio(
                level["streamfix"]["events_per_s"], level[RELAY]["events_per_s"]
            )
    return out


def client_ratios(results: dict[str, Any]) -> dict[str, str]:
    """The upstream client's effect alone, one number per metric (only with both `CLIENTS`)."""
    new, old = CLIENTS
    lat = results.get("latency", {})
    out: dict[str, str] = {}
    for kind, label in (("json", "non-streamed"), ("short", "stream first byte")):
        mine, theirs = added(lat, kind, "ttfb", new), added(lat, kind, "ttfb", old)
        if mine and theirs:
            out[f"added latency, {label} median: {new} / {old}"] = ratio(mine[0], theirs[0])
    for kind, levels in results.get("throughput", {}).items():
        level = levels.get("50", {})
        if new in level and old in level:
            out[f"throughput c=50, {kind}: {new} / {old}"] = ratio(
                level[new]["events_per_s"], level[old]["events_per_s"]
            )
    for kind, per_target in results.get("cpu", {}).items():
        if new in per_target and old in per_target:
            out[f"CPU per event, {kind}: {new} / {old}"] = ratio(
                server_cpu(per_target, new), server_cpu(per_target, old)
            )
    return out


def goals(results: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Issue 9's targets, each with the figure measured and whether it is met."""
    lat = results.get("latency", {})
    found: list[tuple[str, str, bool | None]] = []
    for kind, measure, label in (
        ("json", "ttfb", "non-streamed"),
        ("json", "ttlb", "non-streamed, last byte"),
        ("short", "ttfb", "stream, first byte"),
    ):
        pair = added(lat, kind, measure, "streamfix")
        if pair:
            found.append(
                (f"added median <= 0.5 ms ({label})", f"{ms(pair[0])} ms", pair[0] <= 0.0005)
            )
        theirs = added(lat, kind, measure, "litellm")
        if pair and theirs and pair[0] > 0:
            factor = theirs[0] / pair[0]
            found.append((f"10x lower than LiteLLM ({label})", f"{factor:.1f}x", factor >= 10))
    for kind, per_target in results.get("cpu", {}).items():
        mine, theirs = server_cpu(per_target, "streamfix"), server_cpu(per_target, "litellm")
        if mine and theirs:
            factor = theirs / mine
            found.append((f"CPU 10x lower than LiteLLM ({kind})", f"{factor:.1f}x", factor >= 10))
    for kind, floor in (("text", 0.8), ("gtools", 0.6), ("otools", 0.6)):
        level = results.get("throughput", {}).get(kind, {}).get("50", {})
        if "streamfix" in level and "do-nothing" in level:
            share = level["streamfix"]["events_per_s"] / max(level["do-nothing"]["events_per_s"], 1)
            found.append(
                (
                    f"throughput c=50 >= {floor}x do-nothing ({kind})",
                    f"{share:.2f}x",
                    share >= floor,
                )
            )
    memory = results.get("memory", {}).get("streamfix")
    if memory:
        per = (memory["held_rss"] - memory["idle_rss"]) / max(memory["opened"], 1) / 1024
        found.append(("per-stream memory <= 64 KiB", f"{per:.1f} KiB", per <= 64))
    growth = results.get("growth", {}).get("streamfix")
    if growth:
        grew = (growth["rss"][-1][1] - growth["rss"][0][1]) / MiB
        full = growth["exchanges"] >= 20_000
        found.append(
            (
                "RSS growth <= 5 MiB over 20,000 exchanges",
                f"{grew:+.1f} MiB over {growth['exchanges']:,}",
                (grew <= 5) if full else None,
            )
        )
    return found + markup_goals(results)


def own_block_notes(lat: dict) -> list[str]:
    """A line per latency block after the first: whose added latency is against which direct."""
    lines = []
    for block in lat.get("blocks", [])[1:]:
        others = ", ".join(name for name in block["targets"] if name != BASELINE)
        base = block["kinds"].get("json", {}).get(BASELINE, {}).get("ttfb") or {}
        lines.append(
            f"added latency of {others}: measured after the others, interleaved only with "
            f"{BASELINE}, less that block's {BASELINE} (non-streamed first byte there: "
            f"[{ms(base.get('median'))} / {ms(base.get('p99'))}])."
        )
    return lines


COLUMN_NOTES = {
    RELAY: f"{RELAY}: bench/perf_relay.py, a raw TCP relay in front of the fake (asyncio, bytes "
    "copied both ways, no HTTP parsing): the floor for any proxy.",
    "do-nothing-httpx": 'do-nothing (httpx): do-nothing with server.upstream_client = "httpx" '
    "(httpx's transport, as before proxy/upstream/http1.py); not run in the growth phase.",
    "portkey": "portkey: Portkey's gateway (Node), routed by x-portkey-provider: openai and "
    "x-portkey-custom-host: the fake; its stream reader waits 25 ms before a stream's first event.",
}


def column_notes(names: list[str]) -> list[str]:
    return [COLUMN_NOTES[name] for name in names if name in COLUMN_NOTES]


def report(results: dict[str, Any], names: list[str]) -> str:
    m = results["machine"]
    lines = [
        f"machine: {m['cores']} cores, {m['cpu_model']}, Python {m['python']}; "
        f"load average {m['loadavg_start'][0]:.2f} at start, {m['loadavg_end'][0]:.2f} at end",
        f"streamfix: {m['streamfix']}; {results.get('peer_versions', '')}",
        f"run: {results['mode']}, {results['seconds']:.0f} s; fake writes: {results['writes']}",
        "",
    ]
    rows, header = build_table(results, names)
    lines.append(format_table(rows, header))
    lines += [
        "",
        f"events/s: upstream events ({EVENTS} per stream) delivered per second, whatever the "
        f"proxy merged, best of {results['plan']['rounds']} rounds;",
        "CPU-s per 10k events: server CPU over all rounds. ! = some requests failed (perf.json).",
        *own_block_notes(results.get("latency", {})),
        *column_notes(names),
        *(f"{name}: not measured: {why}" for name, why in results.get("absent", {}).items()),
        "",
        "ratios:",
    ]
    lines += [f"  {k}: {v}" for k, v in results["ratios"].items()]
    recogniser = markup_lines(results)
    if recogniser:
        lines += ["", *recogniser]
    lines += ["", "issue 9 targets (streamfix):"]
    for label, figure, met in results["goals"]:
        mark = "n/a" if met is None else ("met" if met else "MISSED")
        lines.append(f"  {mark:<6} {label}: {figure}")
    problems = results.get("problems") or []
    if problems:
        lines += ["", "problems:"] + [f"  {p}" for p in problems]
    return "\n".join(lines)
