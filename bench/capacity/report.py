"""The capacity bench's printed tables."""

from __future__ import annotations

from typing import Any

KiB = 1024
MiB = 1024 * 1024
LAG_TARGET_MS = 50.0
PER_STREAM_TARGET_KIB = 40.0


def ms(value: float) -> str:
    return f"{value * 1000:.0f}" if value >= 0.0095 else f"{value * 1000:.1f}"


def streams_table(results: list[dict[str, Any]]) -> list[str]:
    header = (
        f"{'case':<26} {'target':<18} {'errors':>6} {'RSS idle/peak MiB':>17} {'KiB/stream':>10} "
        f"{'CPU s':>6} {'ms/open µs/event':>16} {'lag p50/p99/max ms':>19} {'steady p99':>10} "
        f"{'head p50/p99 ms':>16} "
        f"{'full GCs: longest ms':>22} {'busy/others':>11}"
    )
    out = [header, "-" * len(header)]
    for r in results:
        errors = sum(r["errors"].values()) + r["clients_missing"]
        per_stream = (r["rss_peak"] - r["rss_idle"]) / max(r["opened"], 1) / KiB
        lag, steady, heads = r["lag"], r["lag_steady"], r["heads"]
        gc = r.get("gc")
        cost = r.get("cpu_split") or {}
        split = (
            f"{cost['per_open'] * 1000:.2f} {cost['per_event'] * 1e6:.0f}"
            if "per_open" in cost
            else "-"
        )
        pauses = (
            f"{gc['collections'][2]}: {ms(gc['full_longest'][0]) if gc['full_longest'] else '-'}"
            f" (any {ms(gc['longest'])})"
            if gc
            else "-"
        )
        out.append(
            f"{r['case']:<26} {r['target']:<18} {errors:>6} "
            f"{r['rss_idle'] / MiB:>7.0f} / {r['rss_peak'] / MiB:<7.0f} {per_stream:>10.1f} "
            f"{r['cpu_seconds']:>6.1f} {split:>16} "
            f"{ms(lag['p50']):>5} / {ms(lag['p99']):>4} / {ms(lag['max']):<5} "
            f"{ms(steady['p99']):>10} "
            f"{ms(heads['p50']):>6} / {ms(heads['p99']):<7} {pauses:>22} "
            f"{r['machine_busy'] * 100:>5.0f}/{r['others_busy'] * 100:<3.0f}%"
        )
        if r["errors"]:
            out.append(f"{'':<26} errors: {r['errors']}")
    return out


def streams_notes() -> list[str]:
    return [
        "lag: from the upstream's write of an event (its monotonic stamp) to the client's read "
        "of it; steady: events written after the last stream had opened.",
        "head: from the moment a stream was due to open to its response head; KiB/stream: "
        "(peak RSS - idle RSS) / streams opened; CPU s: the proxy's, over the whole case.",
        "ms/open: the proxy's CPU per stream opened (the opening's CPU less its events'); "
        "µs/event: its CPU per event while every stream is open and none has ended.",
        "full GCs: the proxy's collections of the oldest generation during the case, and the "
        "longest; 'any': the longest collection of any generation (bench/capacity/probe).",
        "busy/others: the machine's CPU use during the case (all cores), and the share of it no "
        "process of the bench used: other work on the shared machine.",
    ]


def streams_goals(results: list[dict[str, Any]], target: str = "streamfix") -> list[str]:
    out = []
    for r in results:
        if r["target"] != target:
            continue
        errors = sum(r["errors"].values()) + r["clients_missing"]
        per_stream = (r["rss_peak"] - r["rss_idle"]) / max(r["opened"], 1) / KiB
        p99 = r["lag"]["p99"] * 1000
        met = errors == 0 and p99 < LAG_TARGET_MS and per_stream <= PER_STREAM_TARGET_KIB
        out.append(
            f"  {'met   ' if met else 'MISSED'} {r['case']}: {errors} errors, p99 lag {p99:.0f} ms "
            f"(< {LAG_TARGET_MS:.0f}), {per_stream:.1f} KiB per stream "
            f"(<= {PER_STREAM_TARGET_KIB:.0f})"
        )
    return out
