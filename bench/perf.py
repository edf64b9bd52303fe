"""Performance: streamfix against direct, a raw TCP relay, a do-nothing proxy and LiteLLM (issue 9).

    python bench/perf.py                 # the full run, under 10 minutes on 2 cores
    python bench/perf.py --quick         # a smoke run of about a minute
    python bench/perf.py --profile 15    # then py-spy streamfix, 15 s per profiled load
    python bench/perf.py --no-litellm    # without LiteLLM (its start-up alone takes 10-60 s)
    python bench/perf.py --compare-clients  # plus do-nothing on httpx's upstream client (+1 min)

Processes, all on 127.0.0.1, each its own process group, all ended in `finally`:

- the fake upstream (bench/perf_fake.py): raw asyncio HTTP/1.1, answers chosen by model name;
- the targets: **direct** (the client talks to the fake: the limit), **relay**
  (bench/perf_relay.py: a raw TCP relay, asyncio on uvloop, that accepts on 127.0.0.1, opens a
  connection to the fake per connection and copies bytes both ways until either side closes,
  then closes both; no HTTP parsing: the physical floor of any proxy, one more loopback hop and
  one more process), **do-nothing** (`python -m proxy serve` with `repairs.enabled = false`),
  **streamfix** (default config,
  profile auto: the fake's host says nothing, so the evidence profile watches every stream for
  receipts and captures the Gemini stream's signatures), and
  **litellm** (`litellm[proxy]` in bench/results/litellm-venv, installed when missing, an
  OpenAI-compatible passthrough `openai/*` to the same fake); with `--compare-clients` also
  **do-nothing-httpx** (do-nothing with `server.upstream_client = "httpx"`: the upstream client
  proxy/upstream/http1.py replaced), so the client's own effect is a ratio of two columns of one
  run;
- the load generator (bench/perf_load.py): raw asyncio HTTP/1.1 client, one process, jobs
  over a pipe.

Phases run metric by metric, each over every target in turn, so that a noisy moment of the
machine lands on all targets alike (LiteLLM aside, see below):

1. correctness: one answer per stream kind from every target; streamfix's tool-call streams
   must pass `proxy.repair.conformance.violations` and carry exactly the fake's calls (checked again
   after the load);
2. memory: idle RSS, then RSS with N slow streams held open (per-stream cost);
3. added latency: concurrency 1, non-streamed and a 20-event stream, targets interleaved
   request by request; target minus direct at the median and p99. Block 1 interleaves
   direct, relay, do-nothing (and do-nothing-httpx) and streamfix (both kinds); then LiteLLM
   gets a block of its own with direct, and its added latency is against that block's direct;
4. throughput: closed-loop workers at concurrency 1, 50, 200 on 50-event streams (text,
   Gemini tool calls, OpenAI fragmented tool calls), in rounds with the targets taking turns;
   the best round counts;
5. CPU: server CPU seconds (whole process tree, from /proc) per 10,000 upstream events, from
   a fixed load at concurrency 50, in rounds too;
6. growth: RSS before and after 20,000 sequential exchanges (capped in time; the count done
   is reported); not for do-nothing-httpx (about 23 s more, and not what it is there for);
7. the text tool-call recogniser: two more streamfix processes, **markup-on** and
   **markup-off**, the default config but for `upstream.text_tool_calls` (true / false),
   measured against each other only: plain-text streams (no markup) to a request that declares
   tools, so the recogniser watches every piece of content and finds nothing. Their output is
   first checked to be the fake's text exactly (no tool calls, finish "stop"); then
   throughput at c=50 (and c=1 in the full run) in rounds, the two taking turns and swapping
   who goes first each round, best round each, the ratio on / off (issue: the recogniser costs
   under 5 %, i.e. >= 0.95); then the time to the first content byte of a stream whose
   upstream waits 20 ms between events, interleaved with direct: on and off less direct, and
   on - off, which would be about 20 ms if the recogniser held back the first piece of plain
   text waiting for the next one; and the recogniser's CPU per event in process (the default
   repair chain over the same stream, on against off), as a share of markup-off's server CPU
   per event. On 2 cores shared with other work, two identically configured servers differed by
   up to 10 % in throughput and in CPU per event (an A/A run, both off: 1.09 and 0.90), so the
   two-server ratios only catch a large cost; the in-process share is the steady figure.

LiteLLM keeps working after each response (logging and callback tasks and threads), and on
2 cores that work lands on whatever is measured next, not on all targets alike: interleaved
with the others, it doubled their figures (do-nothing, non-streamed added median 0.64 ms
without LiteLLM in the run, 1.25 ms with it; server CPU 0.64 -> 1.36 ms per request). Such
targets are listed in `LEAVES_WORK_BEHIND`: they get latency blocks of their own (3.), and
every measurement that follows one of theirs (latency blocks, throughput and CPU rounds,
growth, memory, profile) first waits until every server's process tree is under 2 % of a
core over 200 ms, at most 15 s ("settle"; each wait in perf.json, summed up in one line).

Prints one table and writes bench/results/perf.json (raw figures of every phase included).
Under the table, the ratios: streamfix / litellm (added latency, CPU per event), streamfix /
do-nothing (throughput at c=50), streamfix / relay (added latency at the median, throughput at
c=50: how far streamfix is from the floor; no latency ratio when the relay's added median is
at or below 0, i.e. within noise of direct), and do-nothing / do-nothing-httpx.
Under the ratios, the recogniser's figures (7.), and its two targets with issue 9's.
Exit status: 0; 1 when streamfix's output failed a correctness check; 2 when the run was
aborted (a target that would not start, a job past its time limit, the overall deadline).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf_fake import expected_calls
from perf_procs import HOST, cpu_seconds, free_port, start, stop

from proxy.repair.conformance import stream_chunks, violations

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
MiB = 1024 * 1024
EVENTS = 50  # events per stream in the throughput and CPU phases
SHORT = 20  # events of the "short stream" in the latency phase
LITELLM_SPEC = "litellm[proxy]==1.108.7"
TARGETS = ("direct", "relay", "do-nothing", "do-nothing-httpx", "streamfix", "litellm")
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
    deadline_seconds: float = 14 * 60


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
    deadline_seconds=5 * 60,
)


class Failed(Exception):
    pass


def progress(message: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ── the machine ──────────────────────────────────────────────────────────────


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": os.getloadavg(),
        "streamfix": source_revision(),
    }


def source_revision() -> str:
    """Which proxy is measured: the checkout's commit, and whether proxy/ differs from it."""
    try:
        git = ["git", "-C", str(ROOT)]
        rev = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--", "proxy"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return rev + (" + uncommitted changes in proxy/" if changed else "")


# ── the processes ────────────────────────────────────────────────────────────


@dataclass
class Target:
    name: str
    port: int
    process: subprocess.Popen | None = None
    """The server (None for direct: the client talks to the fake)."""
    health: str = "/healthz"
    note: str = ""
    error: str = ""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


def clean_env() -> dict[str, str]:
    """The environment without the caller's STREAMFIX_* and LiteLLM settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("STREAMFIX_", "LITELLM_"))}


def toml(sections: dict[str, dict[str, Any]]) -> str:
    """Flat TOML tables; JSON spells booleans, numbers and plain strings as TOML does."""
    return "\n".join(
        f"[{section}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
        for section, keys in sections.items()
    )


def start_streamfix(
    name: str, port: int, upstream: str, config: dict[str, dict[str, Any]], work: Path
) -> Target:
    """`python -m proxy serve` with `config` in its own file `<name>.toml` (none when empty)."""
    command = [
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--upstream",
        upstream,
        "--host",
        HOST,
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    if config:
        path = work / f"{name}.toml"
        path.write_text(toml(config))
        command[4:4] = ["--config", str(path)]
    process = start(command, RESULTS / "logs" / f"{name}.log", env=clean_env(), cwd=ROOT)
    return Target(name, port, process, "/healthz", " ".join(command[1:]))


def start_relay(port: int, upstream_port: int) -> Target:
    """bench/perf_relay.py on 127.0.0.1:`port`, relaying to the fake on `upstream_port`."""
    command = [
        sys.executable,
        str(BENCH / "perf_relay.py"),
        "--port",
        str(port),
        "--upstream-port",
        str(upstream_port),
    ]
    process = start(command, RESULTS / "logs" / f"{RELAY}.log", env=clean_env(), cwd=ROOT)
    note = " ".join(["python", str(Path(command[1]).relative_to(ROOT)), *command[2:]])
    return Target(RELAY, port, process, "/health", note)  # /health goes through to the fake


def ensure_litellm(venv: Path, spec: str) -> Path:
    """The `litellm` executable in `venv`, installed there first when missing."""
    executable = venv / "bin" / "litellm"
    if executable.exists():
        return executable
    progress(f"installing {spec} into {venv} (once; about a minute)")
    log = RESULTS / "logs" / "litellm-install.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "--quiet", spec],
        ]
        for step in steps:
            try:
                code = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, timeout=600)
            except subprocess.TimeoutExpired as exc:
                raise Failed(f"`{' '.join(step)}` took over 600 s") from exc
            if code.returncode != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-2:]
                said = " | ".join(line[:240] for line in tail)
                raise Failed(f"`{' '.join(step)}` exited {code.returncode}: {said} (see {log})")
    if not executable.exists():
        raise Failed(f"{spec} installed no `litellm` executable")
    return executable


LITELLM_ENV = {
    # No master key: requests are not authenticated (the other targets do no auth either).
    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    "LITELLM_LOG": "ERROR",  # no per-request log lines (the proxies log at warning)
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the cost map at start-up
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "true",
    "DISABLE_ADMIN_UI": "True",
}


def litellm_config(upstream: str) -> dict[str, Any]:
    """A passthrough: every model name goes to the fake as an OpenAI-compatible model. No
    database, no callbacks, no spend or error logs, no cost map fetch."""
    return {
        "model_list": [
            {
                "model_name": "*",
                "litellm_params": {"model": "openai/*", "api_base": upstream, "api_key": "x"},
            }
        ],
        "litellm_settings": {
            "set_verbose": False,
            "json_logs": False,
            "turn_off_message_logging": True,
            "request_timeout": 600,
        },
        "general_settings": {"disable_spend_logs": True, "disable_error_logs": True},
    }


UVICORN_QUIET = {  # uvicorn's access log off, as for the streamfix targets
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
    "handlers": {
        "err": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.stderr",
        }
    },
    "loggers": {
        name: {"handlers": ["err"], "level": "WARNING", "propagate": False}
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
    },
}


def start_litellm(port: int, upstream: str, work: Path, venv: Path, spec: str) -> Target:
    target = Target("litellm", port, health="/health/readiness")
    try:
        executable = ensure_litellm(venv, spec)
    except Failed as exc:
        target.error = f"not installed: {exc}"
        return target
    config = work / "litellm.yaml"  # JSON is YAML
    config.write_text(json.dumps(litellm_config(upstream), indent=1))
    log_config = work / "litellm-logging.json"
    log_config.write_text(json.dumps(UVICORN_QUIET))
    command = [
        str(executable),
        "--config",
        str(config),
        "--host",
        HOST,
        "--port",
        str(port),
        "--num_workers",
        "1",
        "--log_config",
        str(log_config),
    ]
    env = {**clean_env(), **LITELLM_ENV}
    target.process = start(command, RESULTS / "logs" / "litellm.log", env=env, cwd=work)
    target.note = " ".join(["litellm", *command[1:]])
    return target


def litellm_version(venv: Path) -> str:
    python = venv / "bin" / "python"
    try:
        return subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def wait_ready(target: Target, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    url = f"http://{HOST}:{target.port}{target.health}"
    while time.monotonic() < deadline:
        if target.process is not None and target.process.poll() is not None:
            raise Failed(f"exited with status {target.process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise Failed(f"not ready after {timeout:.0f} s ({url})")


def fake_stats(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{HOST}:{port}/stats", timeout=5) as answer:
        return json.loads(answer.read())


class LoadGenerator:
    """bench/perf_load.py in its own process: a job per line in, an answer per line out."""

    def __init__(self) -> None:
        self.process = start(
            [sys.executable, str(BENCH / "perf_load.py")],
            RESULTS / "logs" / "load.log",
            env=clean_env(),
            cwd=ROOT,
            pipes=True,
        )
        self.answers: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(line)
        self.answers.put(b"")

    def run(self, job: dict[str, Any], timeout: float, on_event: Any = None) -> dict[str, Any]:
        """Run `job`; `on_event(name)` hears the job's announcements before its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(job).encode() + b"\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty as exc:
                raise Failed(
                    f"load generator: no answer to {job['job']} in {timeout:.0f} s"
                ) from exc
            if not line:
                raise Failed("load generator exited (see bench/results/logs/load.log)")
            answer = json.loads(line)
            if "event" not in answer:
                break
            if on_event is not None:
                on_event(answer["event"])
        if not answer["ok"]:
            raise Failed(f"load generator: {job['job']}: {answer['error']}")
        return answer["result"]


# ── correctness ──────────────────────────────────────────────────────────────


def calls_in(body: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Calls assembled by index (as a client does), and the finish reasons."""
    calls: dict[int, dict[str, Any]] = {}
    finishes: list[str] = []
    for chunk in stream_chunks(body.encode()):
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            for entry in delta.get("tool_calls") or ():
                call = calls.setdefault(
                    entry.get("index", -1),
                    {"id": None, "name": None, "arguments": "", "signature": None},
                )
                call["id"] = call["id"] or entry.get("id")
                function = entry.get("function") or {}
                call["name"] = call["name"] or function.get("name")
                call["arguments"] += function.get("arguments") or ""
                google = (entry.get("extra_content") or {}).get("google") or {}
                call["signature"] = google.get("thought_signature") or call["signature"]
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    return [calls[i] for i in sorted(calls)], finishes


def check_stream(kind: str, body: str) -> list[str]:
    """Problems of one streamed answer to a tool-call model, for any client."""
    problems = violations(body.encode())
    if problems:
        return problems
    calls, finishes = calls_in(body)
    expected = expected_calls(MODELS[kind])
    for call in [*calls, *expected]:
        with contextlib.suppress(ValueError, TypeError):
            call["arguments"] = json.loads(call["arguments"]) if call["arguments"] else None
    if calls != expected:
        problems.append(f"calls differ from the fake's: got {json.dumps(calls)[:300]}")
    if finishes != ["tool_calls"]:
        problems.append(f"finish reasons {finishes}, expected ['tool_calls']")
    return problems


def correctness(load: LoadGenerator, targets: list[Target], when: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    models = [[MODELS["gtools"], True], [MODELS["otools"], True], [MODELS["text"], True]]
    for target in targets:
        answer = load.run(
            {"job": "sample", "port": target.port, "timeout": 30, "models": models}, 120
        )
        bodies = answer["bodies"]
        entry: dict[str, Any] = {}
        for kind, sample in zip(("gtools", "otools"), bodies, strict=False):
            if sample["status"] != 200:
                entry[kind] = [f"status {sample['status']}: {sample['body'][:200]}"]
            else:
                entry[kind] = check_stream(kind, sample["body"])
        text = bodies[2]
        entry["text"] = (
            [] if text["status"] == 200 else [f"status {text['status']}: {text['body'][:200]}"]
        )
        out[target.name] = entry
    return {"when": when, "targets": out}


# ── settling ─────────────────────────────────────────────────────────────────


def busy_cores(servers: dict[str, int]) -> dict[str, float]:
    """Each server process tree's CPU over one `SETTLE_WINDOW`, as a share of one core. CPU
    comes in clock ticks (10 ms), so under 2 % over 200 ms means no tick was charged."""
    before = {name: cpu_seconds(pid) for name, pid in servers.items()}
    started = time.monotonic()
    time.sleep(SETTLE_WINDOW)
    elapsed = time.monotonic() - started
    return {name: (cpu_seconds(pid) - before[name]) / elapsed for name, pid in servers.items()}


def settle(servers: dict[str, int]) -> tuple[float, bool, dict[str, float]]:
    """Wait until every server is quiet over one window, at most `SETTLE_LIMIT` seconds.
    Returns the seconds waited, whether it gave up, and the last window's shares."""
    started = time.monotonic()
    while True:
        shares = busy_cores(servers)
        waited = time.monotonic() - started
        if max(shares.values(), default=0.0) < SETTLE_QUIET:
            return waited, False, shares
        if waited >= SETTLE_LIMIT:
            return waited, True, shares


@dataclass
class Settler:
    """Remembers whether the last measurement included a target that leaves work behind, and
    if so lets the servers settle before the next one: otherwise LiteLLM's leftovers (its
    logging tasks and threads) are charged to whatever comes next on the two cores."""

    servers: dict[str, int]
    """Every server process tree to watch: target name (or "fake") -> pid."""
    waits: list[dict[str, Any]] = field(default_factory=list)
    owed_to: list[str] = field(default_factory=list)
    """The targets of the last measurement that leave work behind."""

    def before(self, names: list[str], what: str) -> None:
        """Call right before measuring the targets `names`; `what` names the measurement."""
        if self.owed_to:
            waited, gave_up, shares = settle(self.servers)
            self.waits.append(
                {
                    "before": what,
                    "after": self.owed_to,
                    "seconds": round(waited, 3),
                    "timed_out": gave_up,
                    "last_window_cores": {name: round(v, 3) for name, v in shares.items()},
                }
            )
            if gave_up:
                progress(f"settle: servers still busy after {waited:.1f} s, before {what}")
        self.owed_to = [name for name in names if name in LEAVES_WORK_BEHIND]

    def record(self) -> dict[str, Any]:
        """For perf.json (holds `waits` itself, so an aborted run still records them)."""
        return {
            "leaves_work_behind": sorted(LEAVES_WORK_BEHIND),
            "window_s": SETTLE_WINDOW,
            "quiet_below_cores": SETTLE_QUIET,
            "limit_s": SETTLE_LIMIT,
            "waits": self.waits,
        }


def settle_summary(record: dict[str, Any]) -> str:
    waits = record["waits"]
    if not waits:
        after = " or ".join(record["leaves_work_behind"])
        return f"settle: none needed (no measurement followed {after})"
    seconds = sorted(w["seconds"] for w in waits)
    longest = max(waits, key=lambda w: w["seconds"])
    gave_up = sum(w["timed_out"] for w in waits)
    return (
        f"settle after {', '.join(record['leaves_work_behind'])}: {len(waits)} waits until "
        f"every server was under {record['quiet_below_cores']:.0%} of a core over "
        f"{record['window_s'] * 1000:.0f} ms, {sum(seconds):.1f} s in all, median "
        f"{seconds[len(seconds) // 2]:.1f} s, longest {longest['seconds']:.1f} s (before "
        f"{longest['before']}), {gave_up} gave up at {record['limit_s']:.0f} s"
    )


# ── phases ───────────────────────────────────────────────────────────────────


def pids(target: Target, fake_pid: int) -> dict[str, int]:
    found = {"fake": fake_pid}
    if target.pid is not None:
        found["server"] = target.pid
    return found


def wait_fake_idle(fake_port: int, seconds: float) -> float:
    """Seconds until the fake writes no stream (proxies passed the disconnects on)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if fake_stats(fake_port)["open_streams"] == 0:
            return time.monotonic() - started
        time.sleep(0.2)
    return float("inf")


def phase_memory(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake_port: int, settler: Settler
) -> dict:
    out = {}
    # A slow stream: one event a second, 45 events; dropped by the client once measured.
    model = "perf-text-45-d1000"
    for target in targets:
        if target.pid is None:
            continue
        progress(f"memory: {plan.hold_streams} open streams through {target.name}")
        settler.before([target.name], f"memory: {target.name}")
        job = {
            "job": "hold",
            "port": target.port,
            "pid": target.pid,
            "model": model,
            "streams": plan.hold_streams,
            "settle": 1.0,
            "timeout": 40,
        }
        result = load.run(job, 120)
        result["upstream_closed_after_s"] = wait_fake_idle(fake_port, 60)
        out[target.name] = result
    return out


LATENCY_KINDS = (("json", "perf-json", False), ("short", f"perf-text-{SHORT}", True))


def latency_blocks(targets: list[Target]) -> list[list[Target]]:
    """Block 1 interleaves the baseline with every target that leaves no work behind; each
    target that does gets a block of its own with the baseline, whose samples it is compared
    with. Interleaved with the others, its leftovers would land on their next requests."""
    baseline = [t for t in targets if t.name == BASELINE]
    first = [t for t in targets if t.name not in LEAVES_WORK_BEHIND]
    return [first] + [[*baseline, t] for t in targets if t.name in LEAVES_WORK_BEHIND]


def phase_latency(load: LoadGenerator, targets: list[Target], plan: Plan, settler: Settler) -> dict:
    """Every kind of block 1 runs before any other block, so no leftovers of a target that
    leaves work behind overlap a measurement of block 1."""
    blocks: list[dict[str, Any]] = []
    for number, members in enumerate(latency_blocks(targets), 1):
        names = [t.name for t in members]
        block = {
            "block": number,
            "targets": names,
            "baseline": f"{BASELINE} samples of this block",
            "kinds": {},
        }
        blocks.append(block)
        for kind, model, stream in LATENCY_KINDS:
            progress(
                f"latency block {number} ({', '.join(names)}): {plan.latency_requests} {kind} "
                "requests per target, interleaved"
            )
            settler.before(names, f"latency block {number}, {kind}")
            job = {
                "job": "latency",
                "targets": {t.name: t.port for t in members},
                "pids": {t.name: t.pid for t in members if t.pid is not None},
                "kinds": [[kind, model, stream]],
                "warmup": plan.latency_warmup,
                "requests": plan.latency_requests,
                "timeout": 30,
            }
            budget = 60 + (plan.latency_requests + plan.latency_warmup) * len(members) * 0.5
            block["kinds"].update(load.run(job, budget))
    return {"blocks": blocks}


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One load's figures from its rounds: counts, bytes, seconds and CPU added up."""
    total: dict[str, Any] = {"rounds": rounds, "problems": [], "cpu": Counter()}
    for key in ("completed", "errors", "incomplete", "bytes", "requests", "seconds", "client_cpu"):
        total[key] = sum(r[key] for r in rounds)
    for r in rounds:
        total["cpu"].update(r["cpu"])
        total["problems"] += r["problems"][: 5 - len(total["problems"])]
    total["cpu"] = dict(total["cpu"])
    total["response_bytes"] = rounds[0]["response_bytes"]
    return total


def run_rounds(
    load: LoadGenerator,
    targets: list[Target],
    rounds: int,
    job_for: Any,
    timeout: float,
    settler: Settler,
    what: str,
) -> dict[str, dict[str, Any]]:
    """`rounds` rounds, each target's job once per round, targets taking turns."""
    parts: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
    for number in range(rounds):
        for target in targets:
            settler.before([target.name], f"{what}, round {number + 1}: {target.name}")
            parts[target.name].append(load.run(job_for(target, number), timeout))
    return {name: combine(found) for name, found in parts.items()}


def phase_throughput(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake: int, settler: Settler
) -> dict:
    out: dict[str, Any] = {}
    for kind, levels in plan.concurrency.items():
        for concurrency in levels:
            progress(f"throughput: {kind} at concurrency {concurrency}")

            def job_for(target: Target, number: int, c: int = concurrency, k: str = kind) -> dict:
                return {
                    "job": "load",
                    "port": target.port,
                    "model": MODELS[k],
                    "concurrency": c,
                    "seconds": plan.window,
                    "warmup": plan.warmup,
                    "timeout": 60,
                    "pids": pids(target, fake),
                }

            found = run_rounds(
                load,
                targets,
                plan.rounds,
                job_for,
                plan.window + 240,
                settler,
                f"throughput {kind} c={concurrency}",
            )
            for result in found.values():
                # Throughput: the best round (a busy spell elsewhere on the machine only ever
                # slows a round down); CPU per event: all rounds together.
                seconds = result["seconds"]
                rates = [r["requests"] / r["seconds"] for r in result["rounds"]]
                result["events_per_s_by_round"] = [rate * EVENTS for rate in rates]
                result["requests_per_s"] = max(rates)
                result["events_per_s"] = result["requests_per_s"] * EVENTS
                result["server_cores"] = result["cpu"].get("server", 0) / seconds
                server = result["cpu"].get("server")
                events = result["requests"] * EVENTS
                result["server_cpu_per_10k_events"] = (
                    server * 10_000 / events if server is not None and events else None
                )
            out.setdefault(kind, {})[str(concurrency)] = found
    return out


def phase_cpu(
    load: LoadGenerator, targets: list[Target], plan: Plan, fake: int, settler: Settler
) -> dict:
    out: dict[str, Any] = {}
    count = max(plan.rounds, plan.cpu_events // EVENTS)
    for kind in ("text", "gtools"):
        progress(f"cpu: {count} {kind} streams ({count * EVENTS} events) at concurrency 50")

        def job_for(target: Target, number: int, k: str = kind) -> dict:
            share = count // plan.rounds + (1 if number < count % plan.rounds else 0)
            return {
                "job": "load",
                "port": target.port,
                "model": MODELS[k],
                "concurrency": 50,
                "count": share,
                "timeout": 60,
                "pids": pids(target, fake),
            }

        found = run_rounds(load, targets, plan.rounds, job_for, 400, settler, f"cpu {kind}")
        for result in found.values():
            events = result["completed"] * EVENTS
            result["events"] = events
            result["cpu_per_10k_events"] = {
                name: seconds * 10_000 / events if events else None
                for name, seconds in result["cpu"].items()
            }
        out[kind] = found
    return out


def phase_growth(load: LoadGenerator, targets: list[Target], plan: Plan, settler: Settler) -> dict:
    out = {}
    models = [["perf-json", False], [f"perf-text-{SHORT}", True], [f"gemini-gtools-{SHORT}", True]]
    for target in targets:
        if target.pid is None or target.name in NO_GROWTH:
            continue
        progress(f"growth: up to {plan.growth_exchanges} sequential exchanges via {target.name}")
        settler.before([target.name], f"growth: {target.name}")
        job = {
            "job": "sequential",
            "port": target.port,
            "pid": target.pid,
            "models": models,
            "count": plan.growth_exchanges,
            "max_seconds": plan.growth_seconds,
            "timeout": 30,
        }
        out[target.name] = load.run(job, plan.growth_seconds + 120)
    return out


def phase_warmup(load: LoadGenerator, targets: list[Target]) -> None:
    progress("warm-up")
    models = [["perf-json", False], [MODELS["text"], True], [MODELS["gtools"], True]]
    for target in targets:
        job = {
            "job": "sequential",
            "port": target.port,
            "pid": target.pid or os.getpid(),
            "models": models,
            "count": 150,
            "max_seconds": 20,
            "timeout": 30,
        }
        load.run(job, 120)


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

    from proxy.repair.exchange import Exchange
    from proxy.repair.markup.rules import MarkupRules
    from proxy.repair.pipeline import RepairChain
    from proxy.repair.receipts.store import MemoryStore
    from proxy.repair.repairs import default_repairs
    from proxy.repair.rules import RouteRules
    from proxy.settings.chain import chain_options
    from proxy.settings.schema import Settings

    options = chain_options(Settings())
    raws = [event[len(b"data: ") :].strip() for event in text_events(MARKUP_MODEL, EVENTS)]
    request = {"model": MARKUP_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    request["tools"] = TOOLS
    store = MemoryStore(max_entries=100, ttl_seconds=60)

    def one_stream(on: bool) -> int:
        rules = RouteRules(markup=MarkupRules(text_tool_calls=on))
        exchange = Exchange(request_id="bench", request=dict(request), rules=rules)
        chain = RepairChain(default_repairs(options, exchange, store))
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


# ── profile ──────────────────────────────────────────────────────────────────


def phase_profile(
    load: LoadGenerator, target: Target, plan: Plan, seconds: float, fake: int, settler: Settler
) -> dict[str, Any]:
    """py-spy on the streamfix process during a load window, once per (kind, concurrency):
    the recording starts when the load generator starts measuring (after its warm-up)."""
    spy = shutil.which("py-spy")
    if spy is None:
        return {"error": "py-spy not found (python -m pip install py-spy)"}
    out: dict[str, Any] = {}
    for kind, concurrency in plan.profile:
        label = f"{kind}-c{concurrency}"
        raw = RESULTS / f"profile-streamfix-{label}.txt"
        raw.unlink(missing_ok=True)
        log = RESULTS / "logs" / f"py-spy-{label}.log"
        progress(f"profile: py-spy on streamfix, {seconds:.0f} s of {kind} at c={concurrency}")
        settler.before([target.name], f"profile {label}")
        command = [
            *(spy, "record", "--pid", str(target.pid), "--duration", str(int(seconds))),
            *("--rate", "250", "--format", "raw", "--nonblocking", "--output", str(raw)),
        ]
        spying: list[subprocess.Popen] = []

        def begin(
            event: str,
            command: list[str] = command,
            log: Path = log,
            spying: list[subprocess.Popen] = spying,
        ) -> None:
            if event == "measuring" and not spying:
                spying.append(start(command, log))

        job = {
            "job": "load",
            "port": target.port,
            "model": MODELS[kind],
            "stream": kind != "json",
            "concurrency": concurrency,
            "seconds": seconds + 1.5,  # py-spy takes a moment to attach
            "warmup": 0.5,
            "timeout": 60,
            "pids": pids(target, fake),
            "announce": True,
        }
        try:
            load.run(job, seconds + 240, on_event=begin)
            if spying:
                spying[0].wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        finally:
            for process in spying:
                stop(process)
        if not raw.exists():
            text = log.read_text(errors="replace") if log.exists() else "not started"
            out[label] = {"error": f"py-spy wrote nothing: {text.strip()[-300:]}"}
            continue
        out[label] = summarize_profile(raw)
    return out


def _frame_key(frame: str) -> str:
    """`function (pkg/mod/file.py:123)` -> `function (mod/file.py)`: lines folded together."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    short = "/".join(Path(path).parts[-2:]) if path else "?"
    return f"{name} ({short})"


def _package(frame: str) -> str:
    """Where a frame's code lives: `proxy`, `proxy/repairs`, a third-party package's name, or
    `stdlib:<module>` (py-spy gives paths relative to their sys.path entry)."""
    where = frame.partition(" (")[2].rstrip(")").rsplit(":", 1)[0]
    parts = Path(where).parts
    if not parts or where.startswith("<"):
        return "builtin"
    top = parts[0].removesuffix(".py")
    if top == "proxy":
        return "proxy/repairs" if len(parts) > 2 and parts[1] == "repairs" else "proxy"
    if top in sys.stdlib_module_names:
        return f"stdlib:{top}"
    return top


_ENTRY_POINTS = ("(proxy/__main__.py)", "(proxy/cli.py)")


WATCHED = (  # library functions whose inclusive share says where a request's cost goes
    "AsyncClient.send",
    "AsyncConnectionPool.handle_async_request",
    "AsyncConnectionPool._assign_requests_to_connections",
    "AsyncConnectionPool.response_closed",
    "AsyncHTTP11Connection.handle_async_request",
    "RequestResponseCycle.send",
    "Metrics.record",
    "SSEDecoder.feed",
    "RepairChain.on_chunk",
)


IDLE_LEAVES = frozenset({"Condition.wait", "Event.wait", "Queue.get", "Thread.join", "sleep"})


def summarize_profile(raw: Path, top: int = 12) -> dict[str, Any]:
    """Shares of py-spy's samples: self time by function and by package, inclusive time of
    streamfix's functions and of `WATCHED`. `Runner.run` as the leaf is uvloop's own C code
    (the event loop, epoll included)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    watched: Counter[str] = Counter()
    samples = idle = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        if frames[-1].partition(" (")[0] in IDLE_LEAVES:
            idle += count  # a thread waiting (starlette's worker threads between jobs)
            continue
        samples += count
        own[_frame_key(frames[-1])] += count
        packages[_package(frames[-1])] += count
        for key in {_frame_key(f) for f in frames}:
            total[key] += count
        for name in {f.partition(" (")[0] for f in frames} & set(WATCHED):
            watched[name] += count

    def share(counter: Counter[str]) -> list[list[Any]]:
        return [[key, round(100 * n / samples, 1)] for key, n in counter.most_common(top)]

    proxy_total = Counter(
        {
            key: n
            for key, n in total.items()
            if ("proxy/" in key or "repairs/" in key) and not key.endswith(_ENTRY_POINTS)
        }
    )
    return {
        "samples": samples,
        "idle_samples_left_out": idle,
        "self": share(own),
        "self_by_package": share(packages),
        "inclusive_streamfix_functions": share(proxy_total),
        "inclusive_watched": [
            [name, round(100 * watched[name] / samples, 1)] for name in WATCHED if watched[name]
        ],
        "raw": str(raw.relative_to(ROOT)),
    }


# ── the table ────────────────────────────────────────────────────────────────


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.3f}"


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


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.3g}"


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
    return rows, ["metric", *(COLUMNS.get(name, name) for name in names)]


def format_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


def server_cpu(per_target: dict[str, Any], name: str) -> float | None:
    return ((per_target.get(name) or {}).get("cpu_per_10k_events") or {}).get("server")


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    lat = results.get("latency", {})
    out: dict[str, Any] = {}
    for kind in ("json", "short"):
        for measure in ("ttfb", "ttlb"):
            mine = added(lat, kind, measure, "streamfix")
            theirs = added(lat, kind, measure, "litellm")
            if mine and theirs:
                out[f"added {measure} median, {kind}: streamfix / litellm"] = ratio(
                    mine[0], theirs[0]
                )
    for kind, per_target in results.get("cpu", {}).items():
        if "litellm" in per_target:
            out[f"CPU per event, {kind}: streamfix / litellm"] = ratio(
                server_cpu(per_target, "streamfix"), server_cpu(per_target, "litellm")
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
}


def column_notes(names: list[str]) -> list[str]:
    return [COLUMN_NOTES[name] for name in names if name in COLUMN_NOTES]


def report(results: dict[str, Any], names: list[str]) -> str:
    m = results["machine"]
    lines = [
        f"machine: {m['cores']} cores, {m['cpu_model']}, Python {m['python']}; "
        f"load average {m['loadavg_start'][0]:.2f} at start, {m['loadavg_end'][0]:.2f} at end",
        f"streamfix: {m['streamfix']}; litellm: {results.get('litellm_version') or 'not run'}",
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


def format_profile(profile: dict[str, Any]) -> str:
    lines = []
    for kind, summary in profile.items():
        if "error" in summary:
            lines.append(f"profile {kind}: {summary['error']}")
            continue
        name, _, concurrency = kind.rpartition("-c")
        lines.append(
            f"profile of streamfix, {KIND_LABELS.get(name, name)} at c={concurrency} "
            f"({summary['samples']} samples, raw stacks in {summary['raw']}):"
        )
        for title, key in (
            ("self time by package", "self_by_package"),
            ("self time by function", "self"),
            ("inclusive time, streamfix's own functions", "inclusive_streamfix_functions"),
            ("inclusive time, known cost centres in the stack", "inclusive_watched"),
        ):
            lines.append(f"  {title}:")
            lines += [f"    {share:5.1f}%  {name}" for name, share in summary[key]]
    return "\n".join(lines)


# ── main ─────────────────────────────────────────────────────────────────────


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--no-litellm", action="store_true", help="leave LiteLLM out")
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
    parser.add_argument("--writes", choices=("yield", "burst"), default="yield", help="fake")
    parser.add_argument("--output", default=str(RESULTS / "perf.json"))
    args = parser.parse_args()
    plan = QUICK if args.quick else Plan()
    RESULTS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def deadline(signum: int, frame: Any) -> None:
        raise Failed(f"over the {plan.deadline_seconds:.0f} s deadline")

    signal.signal(signal.SIGALRM, deadline)
    profiling = (args.profile + 30) * len(plan.profile) if args.profile else 0
    signal.alarm(int(plan.deadline_seconds + profiling))

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminated)

    results: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "writes": args.writes,
        "machine": machine(),
        "plan": {k: v for k, v in plan.__dict__.items()},
        "problems": [],
    }
    processes: list[subprocess.Popen] = []
    work = Path(tempfile.mkdtemp(prefix="streamfix-perf-"))
    status = 0
    try:
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
        candidates = [start_relay(free_port(), fake_port)]
        candidates += [
            start_streamfix(name, free_port(), upstream, config, work)
            for name, config in STREAMFIX_CONFIGS.items()
            if name != CLIENTS[1] or args.compare_clients
        ]
        markup_pair = [
            start_streamfix(name, free_port(), upstream, config, work)
            for name, config in MARKUP_TARGETS.items()
        ]
        processes += [t.process for t in markup_pair if t.process is not None]
        if not args.no_litellm:
            venv = Path(args.litellm_venv).resolve()
            candidates.append(start_litellm(free_port(), upstream, work, venv, args.litellm_spec))
        processes += [t.process for t in candidates if t.process is not None]
        wait_ready(direct_health, 20)
        for target in candidates:
            if target.error:
                results["problems"].append(f"{target.name}: {target.error}")
                continue
            try:
                wait_ready(target, 180 if target.name == "litellm" else 30)
            except Failed as exc:
                log = RESULTS / "logs" / f"{target.name}.log"
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                target.error = f"{exc}; log tail: {' | '.join(tail)}"
                results["problems"].append(f"{target.name}: {target.error}")
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
        missing = {RELAY, "do-nothing", "streamfix"} - {t.name for t in targets}
        if missing:
            raise Failed(f"could not start {', '.join(sorted(missing))}")
        if any(t.name == "litellm" for t in targets):
            results["litellm_version"] = litellm_version(venv)
        results["targets"] = {
            t.name: {"port": t.port, "pid": t.pid, "command": t.note} for t in targets
        }
        results["targets"]["direct"]["fake_pid"] = fake.pid
        results["litellm_settings"] = {
            "env": LITELLM_ENV,
            "config": litellm_config(upstream),
            "uvicorn_log_level": "WARNING",
        }
        names = [t.name for t in targets]
        progress(f"targets up: {', '.join(names)} (fake on {fake_port})")

        load = LoadGenerator()
        processes.append(load.process)
        servers = {t.name: t.pid for t in [*targets, *ready_pair] if t.pid is not None}
        settler = Settler({**servers, "fake": fake.pid})
        results["settle"] = settler.record()
        results["correctness"] = [correctness(load, targets, "before the load")]
        phase_warmup(load, targets)
        results["memory"] = phase_memory(load, targets, plan, fake_port, settler)
        results["latency"] = phase_latency(load, targets, plan, settler)
        results["throughput"] = phase_throughput(load, targets, plan, fake.pid, settler)
        results["cpu"] = phase_cpu(load, targets, plan, fake.pid, settler)
        results["growth"] = phase_growth(load, targets, plan, settler)
        if len(ready_pair) == len(MARKUP_TARGETS):
            phase_warmup(load, ready_pair)
            results["markup"] = phase_markup(load, targets[0], ready_pair, plan, fake.pid, settler)
            results["targets"].update(
                {t.name: {"port": t.port, "pid": t.pid, "command": t.note} for t in ready_pair}
            )
        results["correctness"].append(correctness(load, targets, "after the load"))
        for check in results["correctness"]:
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
        results["ratios"] = ratios(results)
        results["goals"] = goals(results)
        text = report(results, names)
        if args.profile > 0:
            streamfix = next(t for t in targets if t.name == "streamfix")
            results["profile"] = phase_profile(
                load, streamfix, plan, args.profile, fake.pid, settler
            )
            text += "\n\n" + format_profile(results["profile"])
        text += "\n\n" + settle_summary(results["settle"])
        print(text)
        results["table"] = text
    except (Failed, KeyboardInterrupt) as exc:
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


if __name__ == "__main__":
    sys.exit(main())
