"""What every phase of bench/perf.py shares: paths, stream kinds, target names, the plan of a
run (full or `--quick`), and how a phase reports progress or gives up."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1]  # bench/
ROOT = BENCH.parent
RESULTS = BENCH / "results"
MiB = 1024 * 1024
EVENTS = 50  # events per stream in the throughput and CPU phases
SHORT = 20  # events of the "short stream" in the latency phase
LITELLM_SPEC = "litellm[proxy]==1.108.7"
TARGETS = ("direct", "relay", "do-nothing", "do-nothing-httpx", "streamfix", "litellm", "portkey")
PEERS = ("litellm", "portkey")
"""Other projects' proxies in the run: LiteLLM's (Python) and Portkey's gateway (Node). One that
cannot be installed or started keeps its column in the table, marked not measured, and why."""
BASELINE = "direct"
RELAY = "relay"
"""bench/perf_relay.py: a raw TCP relay in front of the fake (bytes copied both ways, no HTTP
parsing), the floor for any proxy: one more loopback hop and one more process, nothing else."""
STREAMFIX_CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    # target name -> its config file's sections; none: no config file, the defaults
    "do-nothing": {"repairs": {"enabled": False}},
    "do-nothing-httpx": {"repairs": {"enabled": False}, "server": {"upstream_client": "httpx"}},
    "streamfix": {},
}
CLIENTS = ("do-nothing", "do-nothing-httpx")
"""The do-nothing proxy on its own HTTP/1.1 upstream client and on httpx's (`--compare-clients`
only): the same server but for the client, so their ratio is the client's effect alone."""
COLUMNS = {"do-nothing-httpx": "do-nothing (httpx)"}  # table headers other than the name
MARKUP_TARGETS: dict[str, dict[str, dict[str, Any]]] = {
    "markup-on": {"upstream": {"text_tool_calls": True}},
    "markup-off": {"upstream": {"text_tool_calls": False}},
}
"""The recogniser's phase (7.): streamfix as configured by default (the recogniser is on by
default) and the same with it off; in no other phase, so they change no other figure."""
MARKUP_MODEL = f"perf-tools-text-{EVENTS}"
"""Plain text, no markup; "tools" in the name makes the load generator declare tools."""
MARKUP_GAP_MS = 20
MARKUP_FIRST_MODEL = f"perf-tools-text-4-d{MARKUP_GAP_MS}"
"""A short plain stream whose upstream waits MARKUP_GAP_MS between events: a first piece held
back for the next one would arrive that much later."""
MARKUP_CHECK_MODEL = "perf-tools-hermes-20"
"""Text ending in a Hermes tool call written as content (bench/perf_fake.py): markup-on must
turn it into a read_file call, markup-off must leave it as text, or the phase measures
nothing."""
MARKUP_FLOOR = 0.95
"""The issue's target: the recogniser costs under 5 % of throughput (on / off >= 0.95)."""
NO_GROWTH = frozenset({"do-nothing-httpx"})
"""Left out of the growth phase: 20,000 sequential exchanges take it about 23 s (up to
`growth_seconds`), and it is in the run to compare speed, not to look for leaks; without it the
full run with `--compare-clients` stays near 8 minutes."""
LEAVES_WORK_BEHIND = frozenset({"litellm"})
"""Targets that keep working after each response (LiteLLM: logging and callback tasks and
threads). On 2 cores that work lands on whatever is measured next, so these targets get their
own latency block, and every measurement that follows one waits for the servers to settle."""
OWN_LATENCY_BLOCK = LEAVES_WORK_BEHIND | {"portkey"}
"""Targets measured for latency in a block of their own with direct, not interleaved with the
others: those that leave work behind, and Portkey's gateway, whose Node process, run between
two requests of the others, doubled their added latency and CPU per request (streamfix 0.38 ->
0.69-0.75 ms, do-nothing 0.29 -> 0.61-0.66 ms, the relay 0.03 -> 0.06-0.07 ms in one A/B/A/B
run): what the others' next request finds in the caches is what ran before it."""
SETTLE_WINDOW = 0.2  # seconds of CPU reading per check
SETTLE_QUIET = 0.02  # share of one core below which a process tree counts as quiet
SETTLE_LIMIT = 15.0  # seconds; a settle that does not come gives up and is recorded so
MODELS = {  # stream kind -> model name the fake understands
    "text": f"perf-text-{EVENTS}",
    "gtools": f"gemini-gtools-{EVENTS}",
    "otools": f"perf-otools-{EVENTS}",
    "json": "perf-json",  # non-streamed
}
KIND_LABELS = {
    "text": "text",
    "gtools": "Gemini tool calls",
    "otools": "OpenAI fragmented calls",
    "json": "non-streamed",
}


@dataclass(frozen=True)
class Plan:
    latency_requests: int = 500
    latency_warmup: int = 50
    window: float = 2.5
    warmup: float = 0.5
    rounds: int = 2
    """Throughput and CPU loads are cut into rounds, the targets taking turns round by round,
    so that a busy spell of the machine lands on every target alike. Throughput is the best
    round's, CPU per event that of all rounds together."""
    concurrency: dict[str, tuple[int, ...]] = field(
        default_factory=lambda: {"text": (1, 50, 200), "gtools": (1, 50, 200), "otools": (50,)}
    )
    cpu_events: int = 10_000
    hold_streams: int = 500
    growth_exchanges: int = 20_000
    growth_seconds: float = 45.0
    markup_concurrency: tuple[int, ...] = (1, 50)
    markup_rounds: int = 6
    """Throughput rounds of the recogniser's phase: markup-on and markup-off alternate, each
    going first in every other round."""
    markup_requests: int = 150
    """First-content-byte samples per target (each stream takes about 3 x MARKUP_GAP_MS)."""
    profile: tuple[tuple[str, int], ...] = (
        ("json", 10),
        ("text", 50),
        ("gtools", 50),
        ("otools", 50),
        ("text", 200),
    )
    peers_requests: int = 400
    peers_warmup: int = 50
    peers_concurrency: int = 16
    peers_rounds: int = 5
    peers_window: float = 1.5
    """The peers phase: non-streamed requests at concurrency 1, then text streams at
    `peers_concurrency` in rounds of `peers_window` seconds, every target in turn."""
    deadline_seconds: float = 18 * 60
    """The full run took 12 minutes with Portkey's column (731 s, load average 1.5-1.9)."""


QUICK = Plan(
    latency_requests=100,
    latency_warmup=10,
    window=1.0,
    warmup=0.3,
    rounds=1,
    concurrency={"text": (1, 50), "gtools": (50,), "otools": ()},
    cpu_events=2_000,
    hold_streams=100,
    growth_exchanges=1_000,
    growth_seconds=5.0,
    markup_concurrency=(50,),
    markup_rounds=5,
    markup_requests=40,
    profile=(("json", 10), ("text", 50), ("gtools", 50)),
    peers_requests=150,
    peers_warmup=20,
    peers_rounds=3,
    peers_window=1.0,
    deadline_seconds=5 * 60,
)


class Failed(Exception):
    pass


def progress(message: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
