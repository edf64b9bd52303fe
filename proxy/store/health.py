"""Whether the shared store answers: one warning when an outage starts, one line when it ends.

A Redis that is down fails every operation of every exchange; a line per failure would bury
the log (and repeat the same news thousands of times a minute). So the outage is the event:
a warning at its first failure, an info line at the first success after it, and the failures
in between are only counted (`errors`, `streamfix_store_errors_total`).

A store that is slow rather than down (a paused or overloaded Redis, a host that drops
packets) costs each operation its whole timeout. After such a failure the store is left alone
for HOLD_OFF_SECONDS: operations meanwhile are skipped at once (counted as errors: they were
not served), then one goes through as a probe. A refused connection costs nothing, so it
holds nothing off: the next operation tries again, and finds Redis the moment it is back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

HOLD_OFF_SECONDS = 1.0
"""How long a timed-out store is left alone: at most one exchange a second pays the timeout."""


class StoreHealth:
    """One backend's state, shared by every store on it (receipts and the fronts' state,
    learned rules)."""

    def __init__(self, shown: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.shown = shown
        """The backend as it may be printed: a masked URL, never a password."""
        self.errors = 0
        self.outages = 0
        self.down = False
        self._clock = clock
        self._down_since = 0.0
        self._failed_in_outage = 0
        self._hold_until = 0.0

    def may_try(self) -> bool:
        """False while a timed-out backend is held off (the skip is counted); at most one
        caller per HOLD_OFF_SECONDS gets True then, as the probe."""
        if not self.down:
            return True
        now = self._clock()
        if now < self._hold_until:
            self.errors += 1
            self._failed_in_outage += 1
            return False
        if self._hold_until:  # a probe: the next callers wait for its outcome
            self._hold_until = now + HOLD_OFF_SECONDS
        return True

    def failed(self, operation: str, exc: BaseException, *, timed_out: bool) -> None:
        self.errors += 1
        self._failed_in_outage += 1
        now = self._clock()
        self._hold_until = now + HOLD_OFF_SECONDS if timed_out else 0.0
        if self.down:
            return
        self.down = True
        self.outages += 1
        self._down_since = now
        self._failed_in_outage = 1
        logger.warning(
            "receipt store %s does not answer (%s: %s): requests go on, but receipts and "
            "learned rules are neither kept nor put back until it answers again",
            self.shown,
            operation,
            _said(exc, timed_out),
        )

    def answered(self) -> None:
        if not self.down:
            return
        self.down = False
        self._hold_until = 0.0
        logger.info(
            "receipt store %s answers again, after %.1f s and %d operations not served",
            self.shown,
            self._clock() - self._down_since,
            self._failed_in_outage,
        )


def _said(exc: BaseException, timed_out: bool) -> str:
    text = str(exc) or type(exc).__name__
    return f"timed out ({text})" if timed_out and "time" not in text.lower() else text
