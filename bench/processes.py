"""Processes for the bench scripts that start a proxy (and a fake upstream) as subprocesses:
their environment, waiting until they answer, stopping them.

bench/perf.py has its own, bench/perf_procs.py: process groups and whole process trees.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from pathlib import Path

import httpx


def proxy_environ(checkout: Path | None = None) -> dict[str, str]:
    """This shell's environment without any STREAMFIX_* variable (only a script's flags and
    config files configure the proxy); with `checkout`, PYTHONPATH imports `proxy` from it."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    if checkout is not None:
        environ["PYTHONPATH"] = str(checkout)
    return environ


def stop(process: subprocess.Popen | None, grace: float = 5) -> None:
    """SIGTERM, SIGKILL if it has not exited after `grace` seconds, then wait for it (5 s)."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


async def wait_ready(
    client: httpx.AsyncClient,
    url: str,
    process: subprocess.Popen,
    seconds: float = 20,
    *,
    below_500: bool = False,
) -> None:
    """GET `url` every 100 ms (2 s a try) until it answers 200, or with `below_500` any status
    under 500 (a POST-only route answers 405); RuntimeError naming `url` when `process` exits
    or `seconds` pass first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            status = (await client.get(url, timeout=2)).status_code
            ready = status < 500 if below_500 else status == 200
            if ready:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url}: not ready after {seconds:g} s")
