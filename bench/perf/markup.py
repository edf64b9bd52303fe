"""Phase 7, the text tool-call recogniser: markup-on against markup-off (throughput, the first
content byte, CPU per event in process), and its lines and goals in the report."""

from __future__ import annotations

import time
from typing import Any

from proxy.repair.conformance import stream_chunks

from .config import (
    BASELINE,
    EVENTS,
    MARKUP_CHECK_MODEL,
    MARKUP_FIRST_MODEL,
    MARKUP_FLOOR,
    MARKUP_GAP_MS,
    MARKUP_MODEL,
    MARKUP_TARGETS,
    Plan,
    progress,
)
from .correctness import calls_in
from .figures import ms, ratio
from .load import LoadGenerator
from .rounds import combine
from .servers import Target
from .settle import Settler, pids


def plain_stream(body: str) -> tuple[str, int, list[str]]:
    """A stream's content text, its tool-call entries counted, and its finish reasons."""
    text, entries, finishes = "", 0, []
    for chunk in stream_chunks(body.encode()):
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            entries += len(delta.get("tool_calls") or ())
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    return text, entries, finishes


def phase_markup(
    load: LoadGenerator,
    direct: Target,
    pair: list[Target],
    plan: Plan,
    fake: int,
    settler: Settler,
) -> dict[str, Any]:
    """The recogniser's cost on plain text with tools declared (7. in the docstring)."""
    names = [t.name for t in pair]
    out: dict[str, Any] = {
        "model": MARKUP_MODEL,
        "first_content_model": MARKUP_FIRST_MODEL,
        "configs": {name: MARKUP_TARGETS[name] for name in names},
        "problems": [],
        "throughput": {},
    }
    progress(f"recogniser: {MARKUP_MODEL} through {', '.join(names)}, checked against direct")
    settler.before(names, "recogniser: correctness")
    bodies = {}
    for target in [direct, *pair]:
        job = {
            "job": "sample",
            "port": target.port,
            "timeout": 30,
            "models": [[MARKUP_MODEL, True]],
        }
        bodies[target.name] = load.run(job, 120)["bodies"][0]
    want = plain_stream(bodies[direct.name]["body"])[0]
    for target in pair:
        sample = bodies[target.name]
        if sample["status"] != 200:
            out["problems"].append(f"{target.name}: status {sample['status']}")
            continue
        text, entries, finishes = plain_stream(sample["body"])
        if text != want:
            out["problems"].append(f"{target.name}: content differs from the fake's: {text[:80]!r}")
        if entries or finishes != ["stop"]:
            out["problems"].append(f"{target.name}: {entries} tool-call entries, {finishes}")
    for target in pair:
        job = {
            "job": "sample",
            "port": target.port,
            "timeout": 30,
            "models": [[MARKUP_CHECK_MODEL, True]],
        }
        sample = load.run(job, 120)["bodies"][0]
        calls, finishes = calls_in(sample["body"]) if sample["status"] == 200 else ([], [])
        called = [call["name"] for call in calls]
        want_calls = (
            ["read_file"] if MARKUP_TARGETS[target.name]["upstream"]["text_tool_calls"] else []
        )
        if called != want_calls or finishes != (["tool_calls"] if want_calls else ["stop"]):
            out["problems"].append(
                f"{target.name}: a Hermes call written as text gave calls {called}, finish "
                f"{finishes} (expected {want_calls or 'none'}): is the recogniser on / off?"
            )
    for concurrency in plan.markup_concurrency:
        progress(
            f"recogniser: throughput at concurrency {concurrency}, {plan.markup_rounds} rounds"
        )
        parts: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for number in range(plan.markup_rounds):
            order = pair if number % 2 == 0 else pair[::-1]
            for target in order:
                settler.before([target.name], f"recogniser c={concurrency}: {target.name}")
                job = {
                    "job": "load",
                    "port": target.port,
                    "model": MARKUP_MODEL,
                    "concurrency": concurrency,
                    "seconds": plan.window,
                    "warmup": plan.warmup,
                    "timeout": 60,
                    "pids": pids(target, fake),
                }
                parts[target.name].append(load.run(job, plan.window + 240))
        level: dict[str, Any] = {}
        for name, rounds in parts.items():
            result = combine(rounds)
            rates = [r["requests"] / r["seconds"] for r in rounds]
            result["events_per_s_by_round"] = [rate * EVENTS for rate in rates]
            result["events_per_s"] = max(rates) * EVENTS
            server, events = result["cpu"].get("server"), result["requests"] * EVENTS
            result["server_cpu_per_10k_events"] = (
                server * 10_000 / events if server is not None and events else None
            )
            level[name] = result
        out["throughput"][str(concurrency)] = level
    members = [direct, *pair]
    progress(
        f"recogniser: first content byte, {plan.markup_requests} streams per target "
        f"({MARKUP_GAP_MS} ms between upstream events), interleaved with direct"
    )
    settler.before(names, "recogniser: first content byte")
    job = {
        "job": "latency",
        "targets": {t.name: t.port for t in members},
        "pids": {t.name: t.pid for t in members if t.pid is not None},
        "kinds": [["first_content", MARKUP_FIRST_MODEL, True]],
        "warmup": 5,
        "requests": plan.markup_requests,
        "timeout": 30,
        "content": True,
    }
    budget = 60 + (plan.markup_requests + 5) * len(members) * (0.5 + 4 * MARKUP_GAP_MS / 1000)
    out["first_content"] = load.run(job, budget)["first_content"]
    progress("recogniser: its CPU per event in process (the repair chain, on and off)")
    try:
        out["in_process"] = recogniser_in_process()
    except Exception as exc:  # the proxy's internals moved: say so, measure the rest
        out["in_process"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def recogniser_in_process(rounds: int = 25, streams: int = 80) -> dict[str, Any]:
    """The recogniser's CPU alone, in this process: the default repair chain over the fake's
    plain 50-event stream (tools declared, each chunk parsed as the server does), a fresh
    chain per stream, with `text_tool_calls` on and off, interleaved; the best round each.
    Far steadier than two servers' throughput on a machine shared with other work."""
    import orjson
    from perf_fake import text_events
    from perf_load import TOOLS

    from proxy.repair.forwarded import Forwarded
    from proxy.repair.markup.rules import MarkupRules
    from proxy.repair.phases import Phases
    from proxy.repair.rules import RouteRules
    from proxy.repair.tally import Tally
    from proxy.settings.chain import chain_options
    from proxy.settings.schema import Settings
    from proxy.store.memory_store import MemoryStore

    options = chain_options(Settings())
    raws = [event[len(b"data: ") :].strip() for event in text_events(MARKUP_MODEL, EVENTS)]
    request = {"model": MARKUP_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    request["tools"] = TOOLS
    store = MemoryStore(max_entries=100, ttl_seconds=60)
    phases = Phases(options, store)

    def one_stream(on: bool) -> int:
        rules = RouteRules(markup=MarkupRules(text_tool_calls=on))
        chain = phases.stream(Forwarded(dict(request), rules), Tally("bench"))
        out = 0
        for raw in raws:
            out += len(chain.on_chunk(orjson.loads(raw), raw))
        return out

    best: dict[str, float] = {}
    for _ in range(rounds):
        for label, on in (("on", True), ("off", False)):
            started = time.process_time()
            for _ in range(streams):
                one_stream(on)
            per_event = (time.process_time() - started) / (streams * EVENTS)
            best[label] = min(best.get(label, per_event), per_event)
    return {"cpu_s_per_event": best, "streams_per_round": streams, "rounds": rounds}


def markup_figures(results: dict[str, Any]) -> dict[str, Any]:
    """The recogniser's headline figures, from perf.json's "markup" (empty when not run)."""
    markup = results.get("markup") or {}
    if not markup.get("throughput"):
        return {}
    on, off = MARKUP_TARGETS
    out: dict[str, Any] = {"throughput": {}}
    for concurrency, level in markup["throughput"].items():
        a, b = level.get(on), level.get(off)
        if a and b:
            out["throughput"][concurrency] = {
                "on": a["events_per_s"],
                "off": b["events_per_s"],
                "ratio": a["events_per_s"] / b["events_per_s"] if b["events_per_s"] else None,
                "cpu_on": a["server_cpu_per_10k_events"],
                "cpu_off": b["server_cpu_per_10k_events"],
                "errors": a["errors"] + a["incomplete"] + b["errors"] + b["incomplete"],
            }
    first = markup.get("first_content") or {}
    base = (first.get(BASELINE) or {}).get("ttfc") or {}
    for name, key in ((on, "on"), (off, "off")):
        mine = (first.get(name) or {}).get("ttfc") or {}
        if mine and base:
            out[f"ttfc_{key}"] = (mine["median"] - base["median"], mine["p99"] - base["p99"])
    if "ttfc_on" in out and "ttfc_off" in out:
        out["ttfc_on_minus_off"] = out["ttfc_on"][0] - out["ttfc_off"][0]
    chain = (markup.get("in_process") or {}).get("cpu_s_per_event")
    level = markup["throughput"].get("50", {}).get(off) or {}
    server = level.get("server_cpu_per_10k_events")
    if chain and server:
        added = chain["on"] - chain["off"]
        out["in_process"] = {"added": added, "server": server / 10_000}
        out["in_process"]["share"] = added / (server / 10_000)
    return out


def markup_lines(results: dict[str, Any]) -> list[str]:
    figures = markup_figures(results)
    if not figures:
        return []
    on, off = MARKUP_TARGETS
    lines = [
        f"text tool-call recogniser (7.): plain-text streams, tools declared; {on} / {off} = "
        "default config with upstream.text_tool_calls = true / false:"
    ]
    for concurrency, f in figures["throughput"].items():
        cpu = (
            f"; server CPU-s per 10k events {f['cpu_on']:.2f} / {f['cpu_off']:.2f}"
            if f["cpu_on"] is not None and f["cpu_off"] is not None
            else ""
        )
        lines.append(
            f"  throughput c={concurrency}, events/s: on {f['on']:,.0f}, off {f['off']:,.0f}, "
            f"on / off {ratio(f['on'], f['off'])}{cpu}"
            + (f", on / off {ratio(f['cpu_on'], f['cpu_off'])}" if cpu else "")
            + (" !" if f["errors"] else "")
        )
    if "ttfc_on" in figures and "ttfc_off" in figures:
        a, b = figures["ttfc_on"], figures["ttfc_off"]
        lines.append(
            f"  added time to first content byte, ms, median / p99 (less direct): on "
            f"{ms(a[0])} / {ms(a[1])}, off {ms(b[0])} / {ms(b[1])}; on - off median "
            f"{ms(figures['ttfc_on_minus_off'])} (a held-back first piece: +{MARKUP_GAP_MS})"
        )
    chain = figures.get("in_process")
    if chain:
        lines.append(
            f"  in process: the recogniser adds {chain['added'] * 1e6:.2f} µs of CPU per event to "
            f"the repair chain, {chain['share']:.1%} of {off}'s server CPU per event at c=50 "
            f"({chain['server'] * 1e6:.1f} µs)"
        )
    error = ((results.get("markup") or {}).get("in_process") or {}).get("error")
    if error:
        lines.append(f"  in process: not measured ({error})")
    for problem in (results.get("markup") or {}).get("problems", []):
        lines.append(f"  problem: {problem}")
    return lines


def markup_goals(results: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    figures = markup_figures(results)
    found: list[tuple[str, str, bool | None]] = []
    level = figures.get("throughput", {}).get("50")
    if level and level["ratio"] is not None:
        found.append(
            (
                f"recogniser costs < 5 % throughput (c=50, on / off >= {MARKUP_FLOOR})",
                f"{level['ratio']:.3f}x",
                level["ratio"] >= MARKUP_FLOOR,
            )
        )
    if level and level["cpu_on"] and level["cpu_off"]:
        # The same cost as server CPU per event: on a shared machine throughput rounds swing
        # with whatever else runs, CPU per event much less.
        share = level["cpu_on"] / level["cpu_off"]
        found.append(
            (
                f"recogniser server CPU per event (c=50, on / off <= {1 / MARKUP_FLOOR:.3f})",
                f"{share:.3f}x",
                share <= 1 / MARKUP_FLOOR,
            )
        )
    chain = figures.get("in_process")
    if chain:
        found.append(
            (
                "recogniser CPU (in process) < 5 % of the server's CPU per event",
                f"{chain['share']:.1%}",
                chain["share"] < 1 - MARKUP_FLOOR,
            )
        )
    if "ttfc_on_minus_off" in figures:
        held = figures["ttfc_on_minus_off"]
        limit = MARKUP_GAP_MS / 4 / 1000
        found.append(
            (
                f"recogniser holds back nothing on plain text (first content, on - off median "
                f"< {MARKUP_GAP_MS / 4:g} ms)",
                f"{ms(held)} ms",
                held < limit,
            )
        )
    if (results.get("markup") or {}).get("problems"):
        found.append(("recogniser passes plain text through unchanged", "see problems", False))
    return found
