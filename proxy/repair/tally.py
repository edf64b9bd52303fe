"""What one exchange's repairs counted, and the one spelling of it for logs, header and metrics.

The request repairs and the stream links count on it, and the answer watch leaves on it what the
upstream said about its answer; nothing else rides on it (the body and the rules are the request
phase's `Forwarded`, the server's fields its `ExchangeRecord`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.repair.answer_facts import AnswerFacts

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Tally:
    request_id: str
    repairs: Counter[str] = field(default_factory=Counter)
    """Repairs applied and anomalies seen, by kind; summed into metrics and the log line."""
    answer: AnswerFacts | None = None
    """The answer's model, id, finish reasons and reported usage, once the stream phase's
    answer watch (answer_watch.py) is built; None for an exchange no answer went through."""

    def count(self, kind: str, amount: int = 1) -> None:
        if amount:
            self.repairs[kind] += amount
            # `--log-level debug` shows each repair as it happens. isEnabledFor is a cached
            # lookup, so at the usual levels this costs the streaming path next to nothing.
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("[%s] %s +%d", self.request_id, kind, amount)

    def summary(self, also: Mapping[str, int] | None = None) -> str:
        """The repairs so far as `kind:count,…` in kind order, or `none`: one spelling for the
        log line, the `x-streamfix-repairs` header and the debug comment. `also`: counts not
        booked yet (a front's translation, booked when its stream closes), added in."""
        repairs: Mapping[str, int] = self.repairs
        if also:
            repairs = self.repairs + Counter({kind: n for kind, n in also.items() if n})
        return ",".join(f"{kind}:{n}" for kind, n in sorted(repairs.items())) or "none"

    def note(self, kind: str, message: str, *args: Any) -> None:
        """Count `kind` and log why, tagged with the request id."""
        self.count(kind)
        logger.warning("[%s] %s: " + message, self.request_id, kind, *args)
