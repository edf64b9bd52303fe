"""Processes for bench/perf.py: CPU and memory from /proc, ports, starting and stopping.

CPU and RSS of a server are those of its whole process tree (the process and every live
descendant), so a server that forks workers is measured whole.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

HOST = "127.0.0.1"


def serve_command(upstream: str, port: int, config: Path | None = None) -> list[str]:
    """`python -m proxy serve` on HOST:`port` in front of `upstream`, quiet but for warnings,
    with `config` when given: how every bench script starts the proxy."""
    command = [sys.executable, "-m", "proxy", "serve", "--upstream", upstream]
    if config is not None:
        command += ["--config", str(config)]
    return [*command, "--host", HOST, "--port", str(port), "--log-level", "warning"]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


def tree(pid: int) -> list[int]:
    """`pid` and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live descendants (threads included)."""
    total = 0
    for member in tree(pid):
        fields = _stat_fields(member)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    """VmRSS of `pid` and its live descendants."""
    total = 0
    for member in tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _die_with_parent() -> None:
    """Children get SIGKILL when the benchmark dies, even by a signal no `finally` sees; each
    in its own process group, so stopping it takes its workers too."""
    os.setsid()
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start(
    command: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    pipes: bool = False,
) -> subprocess.Popen:
    """Start `command` with its output in `log` (or stdin/stdout pipes when `pipes`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else out,
            stderr=out if pipes else subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


def stop(process: subprocess.Popen | None) -> None:
    """SIGTERM to the process group of `process` (started by `start`), SIGKILL after 5 s."""
    if process is None:
        return
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    # Workers a server forked may outlive it in the group: end them too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
