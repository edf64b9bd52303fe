"""A real `redis-server` on a loopback port, for the Redis receipt-store tests.

`RedisServer` runs the Debian package's binary as a subprocess with nothing persisted
(`--save "" --appendonly no`), bound to 127.0.0.1 only. `stop()` and `start()` again on the
same port let a test take Redis away and bring it back (outage and recovery). A missing binary
is an error, not a skip: when it is not on the PATH, `ensure_redis_server()` runs
tests/support/ensure_redis.py, which installs it where it can (root or passwordless sudo) and
otherwise says in one line what to install; that line is then the tests' failure.
"""

from __future__ import annotations

import functools
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.servers import free_port
from tests.support.waiting import wait_until

ENSURE_SCRIPT = Path(__file__).resolve().with_name("ensure_redis.py")


class RedisServerMissing(RuntimeError):
    """`redis-server` is not on the PATH, and ensure_redis.py could not install it."""


@functools.cache
def _ensured() -> tuple[str | None, str]:
    """Run ensure_redis.py once per session: (the binary, "") or (None, its one-line reason)."""
    completed = subprocess.run(
        [sys.executable, str(ENSURE_SCRIPT)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    binary = shutil.which("redis-server")
    if completed.returncode == 0 and binary is not None:
        return binary, ""
    lines = completed.stderr.strip().splitlines()
    return None, lines[-1] if lines else f"{ENSURE_SCRIPT.name} exited {completed.returncode}"


def ensure_redis_server() -> str:
    """The path of `redis-server`, installed by ensure_redis.py first when it is missing.

    Raises RedisServerMissing with the script's one-line reason when it cannot be had (the
    script runs once per session: every Redis test then fails with the same line).
    """
    binary = shutil.which("redis-server")
    if binary is not None:
        return binary
    binary, reason = _ensured()
    if binary is None:
        raise RedisServerMissing(reason)
    return binary


class RedisServer:
    """One `redis-server` process on 127.0.0.1:`port`, started and stopped on demand."""

    def __init__(self, port: int | None = None, *, startup_timeout: float = 10.0) -> None:
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._workdir = Path(tempfile.mkdtemp(prefix="streamfix-redis-"))
        self._log = self._workdir / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server (on the same port as before, if it ran before) and wait for PING."""
        if self.running:
            return
        binary = ensure_redis_server()
        # The first start may lose a race for a port picked by free_port(); try a fresh one.
        # A restart must keep its port, so it gets a single attempt.
        attempts = 1 if self._fixed_port or self.process is not None else 3
        for attempt in range(attempts):
            if attempt:
                self.port = free_port()
            if self._launch(binary):
                return
        raise RuntimeError(
            f"redis-server did not answer on 127.0.0.1:{self.port} within "
            f"{self.startup_timeout:.0f}s; its log:\n{self._log_tail()}"
        )

    def stop(self) -> None:
        """Terminate the server and wait for it to exit (then kill it, if it will not)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def ping(self, timeout: float = 0.5) -> bool:
        """True when the server answers PING with PONG (a raw RESP exchange, no client)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    # internals

    def command(self, binary: str) -> list[str]:
        """The server's command line; a deployment (TLS, Sentinel, Cluster) adds to it."""
        return [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self._workdir),
        ]

    def ready(self) -> bool:
        """Whether the started server serves; a server without plain PING overrides it."""
        return self.ping()

    @property
    def workdir(self) -> Path:
        return self._workdir

    def _launch(self, binary: str) -> bool:
        command = self.command(binary)
        with self._log.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        exited = False

        def answered() -> bool:
            nonlocal exited
            exited = self.process.poll() is not None
            return exited or self.ready()

        what = f"redis-server to answer on 127.0.0.1:{self.port}"
        try:
            wait_until(answered, what, self.startup_timeout, interval=0.02)
        except AssertionError:
            self.stop()
            return False
        return not exited  # exited: most likely the port was taken

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A started RedisServer, stopped and cleaned up afterwards."""
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


def started_redis_server() -> Iterator[RedisServer]:
    """Body of the `redis_server` fixture: fails the test (never skips) without the binary."""
    try:
        ensure_redis_server()
        missing = ""
    except RedisServerMissing as exc:
        missing = str(exc)
    if missing:  # outside the except: the failure is the line alone, no chained traceback
        pytest.fail(missing, pytrace=False)
    with running_redis() as server:
        yield server
