"""The proxy as a real process: `python -m proxy ARGS` with its output collected, served on a
free loopback port and answering /healthz, and the configuration file it is given.

Every wait is bounded; `serving` and `run_cli` always stop and reap the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import load_transcript
from tests.support.servers import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 15.0  # seconds for `python -m proxy serve` to answer /healthz
EXIT_TIMEOUT = 10.0  # seconds for a process to exit once told to
LOG_TIMEOUT = 5.0  # seconds for an expected log line to appear


class ProxyProcess:
    """`python -m proxy ARGS` with stdout and stderr collected by background threads."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
        environ.update(env or {})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "proxy", *args],
            cwd=ROOT,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._drain, args=(stream, lines), daemon=True)
            for stream, lines in (
                (self.process.stdout, self._stdout),
                (self.process.stderr, self._stderr),
            )
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(stream: Any, lines: list[str]) -> None:
        for raw in iter(stream.readline, b""):
            lines.append(raw.decode("utf-8", errors="replace"))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    @property
    def output(self) -> str:
        """Everything the process wrote, stdout and stderr."""
        return "".join(self._stdout) + "".join(self._stderr)

    def stderr_lines(self) -> list[str]:
        return [line.rstrip("\n") for line in list(self._stderr) if line.strip()]

    def wait_for(
        self, condition: Callable[[], bool], what: str, timeout: float, interval: float = 0.02
    ) -> None:
        """`wait_until`, failing with the tail of the process's stderr."""
        try:
            wait_until(condition, what, timeout, interval)
        except AssertionError as timed_out:
            pytest.fail(f"{timed_out}; stderr:\n{self.stderr[-3000:]}")

    def wait_for_log(self, text: str, count: int = 1, timeout: float = LOG_TIMEOUT) -> None:
        what = f"{count}x {text!r} in stderr"
        self.wait_for(lambda: self.stderr.count(text) >= count, what, timeout)

    def wait_exit(self, timeout: float = EXIT_TIMEOUT) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {timeout}s later; stderr:\n{self.stderr[-3000:]}")
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it will not go; always reaps the process."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=EXIT_TIMEOUT)
        for reader in self._readers:
            reader.join(timeout=5)


class ServedProxy(ProxyProcess):
    """`python -m proxy serve ARGS --host 127.0.0.1 --port FREE`, answering /healthz."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(["serve", *args, "--host", "127.0.0.1", "--port", str(self.port)], env)

    def wait_healthy(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Until /healthz answers 200; fails at once if the process exits."""
        healthy = answers_healthz(self.url, self.process, lambda: self.stderr)
        self.wait_for(healthy, f"{self.url}/healthz to answer 200", timeout, interval=0.05)


def answers_healthz(
    url: str, process: subprocess.Popen, stderr: Callable[[], str] = lambda: ""
) -> Callable[[], bool]:
    """A condition to wait for: the proxy at `url` answers /healthz with 200. It fails the test at
    once if `process` (serving `url`) has exited, with `stderr()`."""

    def healthy() -> bool:
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode}; stderr:\n{stderr()}")
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    return healthy


@contextmanager
def serving(*args: str, env: dict[str, str] | None = None) -> Iterator[ServedProxy]:
    proxy = ServedProxy(args, env)
    try:
        proxy.wait_healthy()
        yield proxy
    finally:
        proxy.stop()


def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`python -m proxy ARGS` to completion: (exit status, stdout, stderr)."""
    command = ProxyProcess(args, env)
    try:
        code = command.wait_exit()
    finally:
        command.stop()
    return code, "".join(command._stdout), command.stderr


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "streamfix.toml"
    path.write_text(text)
    return str(path)


def chat(model: str, *, stream: bool = True) -> dict[str, Any]:
    return {
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": "go"}],
        **load_transcript(model).meta.get("request", {}),
    }
