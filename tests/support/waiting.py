"""Waiting for a condition instead of sleeping: poll it, bounded, in a sync and an async form.

Both forms share `_polls`, the deadline and interval logic; each only does the sleeping.
On timeout they raise an AssertionError naming `what`; otherwise return the seconds waited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator

WAIT = 5.0  # seconds: the default bound on a wait
INTERVAL = 0.01  # seconds between two looks at the condition


def _polls(
    condition: Callable[[], object], what: str, timeout: float, interval: float
) -> Generator[float, None, float]:
    """Yields how long to sleep before the next look; returns the seconds waited."""
    started = time.monotonic()
    while not condition():
        waited = time.monotonic() - started
        if waited >= timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        yield min(interval, timeout - waited)
    return time.monotonic() - started


def wait_until(
    condition: Callable[[], object], what: str, timeout: float = WAIT, interval: float = INTERVAL
) -> float:
    """Blocks until `condition()` is true; returns the seconds it took."""
    polls = _polls(condition, what, timeout, interval)
    while True:
        try:
            pause = next(polls)
        except StopIteration as done:
            return done.value
        time.sleep(pause)


async def until(
    condition: Callable[[], object], what: str, timeout: float = WAIT, interval: float = INTERVAL
) -> float:
    """Awaits until `condition()` is true, letting the loop run; returns the seconds it took."""
    polls = _polls(condition, what, timeout, interval)
    while True:
        try:
            pause = next(polls)
        except StopIteration as done:
            return done.value
        await asyncio.sleep(pause)
