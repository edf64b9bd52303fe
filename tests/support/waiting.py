"""Waiting for a condition instead of sleeping: poll it, bounded, in a sync and an async form.

Both forms share `_Polls`, the deadline and interval logic; each only does the sleeping.
On timeout they raise an AssertionError naming `what`; otherwise return the seconds waited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

WAIT = 5.0  # seconds: the default bound on a wait
INTERVAL = 0.01  # seconds between two looks at the condition


class _Polls:
    """The looks at `condition`: iterating yields how long to sleep before the next look, until
    it is true (or raises once `timeout` is up); `waited` is then the seconds it took."""

    def __init__(
        self, condition: Callable[[], object], what: str, timeout: float, interval: float
    ) -> None:
        self.condition, self.what, self.timeout, self.interval = condition, what, timeout, interval
        self.waited = 0.0

    def __iter__(self) -> Iterator[float]:
        started = time.monotonic()
        while not self.condition():
            waited = time.monotonic() - started
            if waited >= self.timeout:
                raise AssertionError(f"timed out after {self.timeout}s waiting for {self.what}")
            yield min(self.interval, self.timeout - waited)
        self.waited = time.monotonic() - started


def wait_until(
    condition: Callable[[], object], what: str, timeout: float = WAIT, interval: float = INTERVAL
) -> float:
    """Blocks until `condition()` is true; returns the seconds it took."""
    polls = _Polls(condition, what, timeout, interval)
    for pause in polls:
        time.sleep(pause)
    return polls.waited


async def until(
    condition: Callable[[], object], what: str, timeout: float = WAIT, interval: float = INTERVAL
) -> float:
    """Awaits until `condition()` is true, letting the loop run; returns the seconds it took."""
    polls = _Polls(condition, what, timeout, interval)
    for pause in polls:
        await asyncio.sleep(pause)
    return polls.waited
