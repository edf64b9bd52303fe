"""`--profile SECONDS`: py-spy on the streamfix process under load, folded into where the time
goes (own time per function, inclusive share of watched library calls)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from perf_procs import start, stop

from .config import KIND_LABELS, MODELS, RESULTS, ROOT, Plan, progress
from .load import LoadGenerator
from .servers import Target
from .settle import Settler, pids


def phase_profile(
    load: LoadGenerator, target: Target, plan: Plan, seconds: float, fake: int, settler: Settler
) -> dict[str, Any]:
    """py-spy on the streamfix process during a load window, once per (kind, concurrency):
    the recording starts when the load generator starts measuring (after its warm-up)."""
    # On the PATH, or next to this interpreter (a venv's bin/, not always on the PATH).
    beside = Path(sys.executable).parent / "py-spy"
    spy = shutil.which("py-spy") or (str(beside) if beside.is_file() else None)
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
    """Where a frame's code lives: `proxy/<room>` (server, upstream, repair, wire, ...), a
    third-party package's name, or `stdlib:<module>` (py-spy gives paths relative to their
    sys.path entry)."""
    where = frame.partition(" (")[2].rstrip(")").rsplit(":", 1)[0]
    parts = Path(where).parts
    if not parts or where.startswith("<"):
        return "builtin"
    top = parts[0].removesuffix(".py")
    if top == "proxy":
        return "/".join(parts[:2]) if len(parts) > 2 else "proxy"
    if top in sys.stdlib_module_names:
        return f"stdlib:{top}"
    return top


_ENTRY_POINTS = ("(proxy/__main__.py)", "(proxy/cli.py)", "(server/serving.py)")
STREAMFIX_MARK = "streamfix:"
"""Marks the inclusive counts of streamfix's own frames (their short keys no longer say so)."""


def _is_streamfix(frame: str) -> bool:
    return frame.partition(" (")[2].startswith("proxy/")


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
        for key in {_frame_key(f) for f in frames if not _is_streamfix(f)}:
            total[key] += count
        for key in {_frame_key(f) for f in frames if _is_streamfix(f)}:
            total[STREAMFIX_MARK + key] += count
        for name in {f.partition(" (")[0] for f in frames} & set(WATCHED):
            watched[name] += count

    def share(counter: Counter[str]) -> list[list[Any]]:
        return [[key, round(100 * n / samples, 1)] for key, n in counter.most_common(top)]

    proxy_total = Counter(
        {
            key.removeprefix(STREAMFIX_MARK): n
            for key, n in total.items()
            if key.startswith(STREAMFIX_MARK) and not key.endswith(_ENTRY_POINTS)
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
